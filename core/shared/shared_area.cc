#include "core/shared/shared_area.h"

namespace ckptfs {

std::optional<nlohmann::json> ParseObject(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return j;
}

bool JsonString(const nlohmann::json& j, const char* key, size_t max_bytes, std::string* out) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return false;
  const std::string& value = it->get_ref<const std::string&>();
  if (value.size() > max_bytes) return false;
  *out = value;
  return true;
}

bool JsonUnsigned(const nlohmann::json& j, const char* key, uint64_t* out) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_unsigned()) return false;
  *out = it->get<uint64_t>();
  return true;
}

}  // namespace ckptfs
