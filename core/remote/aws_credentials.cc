#include "core/remote/aws_credentials.h"

#include <cstdlib>
#include <fstream>
#include <iterator>

namespace ckptfs {
namespace {

constexpr size_t kMaxFileBytes = 1 << 20;
constexpr size_t kMaxLine = 4096;
constexpr size_t kMaxEntries = 4096;

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// The file's text (at most kMaxFileBytes + 1 bytes, so that ParseIni refuses larger ones);
// nullopt when it cannot be read.
std::optional<std::string> ReadBounded(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string text(kMaxFileBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  return text;
}

std::string HomeFile(const EnvLookup& env, const char* override_var, const char* name) {
  if (std::optional<std::string> path = env(override_var); path && !path->empty()) return *path;
  std::optional<std::string> home = env("HOME");
  return (home ? *home : std::string()) + "/.aws/" + name;
}

std::string Get(const std::map<std::string, std::string>& section, const std::string& key) {
  auto it = section.find(key);
  return it == section.end() ? "" : it->second;
}

// Credentials from one section; nullopt when it has no key pair.
std::optional<AwsCredentials> FromSection(const std::map<std::string, std::string>& section,
                                          std::string source) {
  AwsCredentials c{Get(section, "aws_access_key_id"), Get(section, "aws_secret_access_key"),
                   Get(section, "aws_session_token"), std::move(source)};
  if (c.access_key.empty() || c.secret_key.empty()) return std::nullopt;
  return c;
}

std::string ProfileName(const EnvLookup& env) {
  std::optional<std::string> profile = env("AWS_PROFILE");
  return profile && !profile->empty() ? *profile : "default";
}

}  // namespace

Result<IniSections> ParseIni(std::string_view text) {
  if (text.size() > kMaxFileBytes) return Status::Error(EINVAL, "larger than 1 MiB");
  IniSections sections;
  std::string current;
  size_t entries = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    if (end - start > kMaxLine) return Status::Error(EINVAL, "a line is longer than 4096 bytes");
    const std::string_view line = Trim(text.substr(start, end - start));
    start = end + 1;
    if (line.empty() || line.front() == '#' || line.front() == ';') continue;
    if (++entries > kMaxEntries) return Status::Error(EINVAL, "more than 4096 entries");
    if (line.front() == '[') {
      const size_t close = line.find(']');
      if (close == std::string_view::npos) continue;
      current = std::string(Trim(line.substr(1, close - 1)));
      sections[current];
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    sections[current][std::string(Trim(line.substr(0, eq)))] =
        std::string(Trim(line.substr(eq + 1)));
  }
  return sections;
}

EnvLookup ProcessEnvironment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (!value) return std::nullopt;
    return std::string(value);
  };
}

Result<AwsCredentials> LoadAwsCredentials(const EnvLookup& env) {
  std::optional<std::string> key = env("AWS_ACCESS_KEY_ID");
  std::optional<std::string> secret = env("AWS_SECRET_ACCESS_KEY");
  if (key && secret && !key->empty() && !secret->empty()) {
    std::optional<std::string> token = env("AWS_SESSION_TOKEN");
    return AwsCredentials{*key, *secret, token ? *token : "", "the environment (AWS_*)"};
  }
  const std::string profile = ProfileName(env);
  const std::string credentials_file = HomeFile(env, "AWS_SHARED_CREDENTIALS_FILE", "credentials");
  const std::string config_file = HomeFile(env, "AWS_CONFIG_FILE", "config");
  std::string why;
  if (std::optional<std::string> text = ReadBounded(credentials_file)) {
    Result<IniSections> ini = ParseIni(*text);
    if (!ini.ok()) {
      why = credentials_file + ": " + ini.status().message() + "; ";
    } else if (auto it = ini->find(profile); it != ini->end()) {
      if (auto c = FromSection(it->second, "profile " + profile + " in " + credentials_file)) {
        return *c;
      }
    }
  }
  if (std::optional<std::string> text = ReadBounded(config_file)) {
    Result<IniSections> ini = ParseIni(*text);
    const std::string section = profile == "default" ? "default" : "profile " + profile;
    if (!ini.ok()) {
      why += config_file + ": " + ini.status().message() + "; ";
    } else if (auto it = ini->find(section); it != ini->end()) {
      if (auto c = FromSection(it->second, "profile " + profile + " in " + config_file)) return *c;
      if (!Get(it->second, "credential_process").empty() ||
          !Get(it->second, "sso_session").empty() || !Get(it->second, "sso_start_url").empty()) {
        why += "profile " + profile + " uses credential_process or SSO, not supported; ";
      }
    }
  }
  return Status::Error(EACCES, "remote: no AWS credentials (" + why +
                                   "looked at AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, profile " +
                                   profile + " in " + credentials_file + " and " + config_file +
                                   ")");
}

std::string LoadAwsRegion(const EnvLookup& env) {
  for (const char* var : {"AWS_REGION", "AWS_DEFAULT_REGION"}) {
    if (std::optional<std::string> region = env(var); region && !region->empty()) return *region;
  }
  const std::string profile = ProfileName(env);
  std::optional<std::string> text = ReadBounded(HomeFile(env, "AWS_CONFIG_FILE", "config"));
  if (!text) return "";
  Result<IniSections> ini = ParseIni(*text);
  if (!ini.ok()) return "";
  auto it = ini->find(profile == "default" ? "default" : "profile " + profile);
  return it == ini->end() ? "" : Get(it->second, "region");
}

}  // namespace ckptfs
