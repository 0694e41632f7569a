#include "core/remote/s3_xml.h"

#include <expat.h>

#include <memory>

namespace ckptfs {
namespace {

constexpr size_t kMaxXml = 1 << 20;
constexpr int kMaxDepth = 32;
constexpr size_t kMaxField = 4096;
constexpr size_t kMaxGroups = 10'000;

struct ParseState {
  XML_Parser parser = nullptr;
  S3Xml out;
  int depth = 0;
  std::string text;      // Of the current depth-2 element, or of a depth-3 one in a group.
  bool has_child = false;  // The current depth-2 element has elements inside.
  bool leaf = true;        // The current depth-3 element holds no elements.
  std::string element;  // The name of the current depth-2 element.
  std::string error;

  void Fail(std::string why) {
    if (error.empty()) error = std::move(why);
    XML_StopParser(parser, XML_FALSE);
  }
};

void OnStart(void* data, const XML_Char* name, const XML_Char** /*attrs*/) {
  auto* s = static_cast<ParseState*>(data);
  if (++s->depth > kMaxDepth) return s->Fail("nested deeper than 32");
  if (s->depth == 1) s->out.root = name;
  if (s->depth == 2) {
    s->text.clear();
    s->has_child = false;
  }
  if (s->depth == 3) {
    if (!s->has_child) {
      if (s->out.groups.size() >= kMaxGroups) return s->Fail("has over 10,000 groups");
      s->out.groups.push_back({s->element, {}});
    }
    s->has_child = true;
    s->text.clear();
    s->leaf = true;
  }
  if (s->depth == 2) s->element = name;
  if (s->depth > 3) s->leaf = false;
}

void OnEnd(void* data, const XML_Char* name) {
  auto* s = static_cast<ParseState*>(data);
  if (s->depth == 2 && !s->has_child) s->out.fields.emplace(name, s->text);
  if (s->depth == 3 && s->leaf && !s->out.groups.empty()) {
    s->out.groups.back().fields.emplace(name, s->text);
  }
  --s->depth;
}

void OnText(void* data, const XML_Char* text, int len) {
  auto* s = static_cast<ParseState*>(data);
  const bool field = (s->depth == 2 && !s->has_child) || (s->depth == 3 && s->leaf);
  if (!field) return;
  if (s->text.size() + static_cast<size_t>(len) > kMaxField) {
    return s->Fail("a field is longer than 4 KiB");
  }
  s->text.append(text, static_cast<size_t>(len));
}

void OnEntityDecl(void* data, const XML_Char*, int, const XML_Char*, int, const XML_Char*,
                  const XML_Char*, const XML_Char*, const XML_Char*) {
  static_cast<ParseState*>(data)->Fail("declares entities");
}

}  // namespace

Result<S3Xml> ParseS3Xml(std::string_view xml) {
  if (xml.size() > kMaxXml) return Status::Error(EINVAL, "S3 answer larger than 1 MiB");
  std::unique_ptr<XML_ParserStruct, decltype(&XML_ParserFree)> parser(XML_ParserCreate("UTF-8"),
                                                                      &XML_ParserFree);
  if (!parser) return Status::Error(ENOMEM, "cannot create an XML parser");
  ParseState state;
  state.parser = parser.get();
  XML_SetUserData(parser.get(), &state);
  XML_SetElementHandler(parser.get(), OnStart, OnEnd);
  XML_SetCharacterDataHandler(parser.get(), OnText);
  XML_SetEntityDeclHandler(parser.get(), OnEntityDecl);
  const XML_Status parsed =
      XML_Parse(parser.get(), xml.data(), static_cast<int>(xml.size()), XML_TRUE);
  if (!state.error.empty()) return Status::Error(EINVAL, "S3 answer " + state.error);
  if (parsed != XML_STATUS_OK) {
    return Status::Error(EPROTO, std::string("S3 answer is not XML: ") +
                                     XML_ErrorString(XML_GetErrorCode(parser.get())));
  }
  if (state.out.root.empty()) return Status::Error(EPROTO, "S3 answer has no element");
  return std::move(state.out);
}

}  // namespace ckptfs
