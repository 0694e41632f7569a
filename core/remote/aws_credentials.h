// AwsCredentials: the keys the remote tier signs its requests with, found as the AWS tools find
// them: the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), else the
// profile AWS_PROFILE (or "default") in the shared credentials file (AWS_SHARED_CREDENTIALS_FILE,
// or ~/.aws/credentials), then in the config file (AWS_CONFIG_FILE, or ~/.aws/config; section
// "[profile NAME]", "[default]"). The region likewise: AWS_REGION, AWS_DEFAULT_REGION, the
// profile's `region` in the config file.
//
// The keys are secrets: never logged, never in stats or messages; `source` says where they came
// from. The files are untrusted: read up to 1 MiB, bounded lines, nothing executed
// (credential_process and SSO are not supported: said as the reason when they are all there is).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "core/base/status.h"

namespace ckptfs {

struct AwsCredentials {
  std::string access_key;
  std::string secret_key;
  std::string session_token;  // Empty: none.
  std::string source;         // Where they came from, for messages ("the environment", ...).
};

// Sections of an INI file (the AWS shared files): section name -> key -> value. Keys and values
// are trimmed; comments (# ;) and lines without '=' are skipped. EINVAL when the text is over
// 1 MiB, a line over 4096 bytes, or there are over 4096 entries.
using IniSections = std::map<std::string, std::map<std::string, std::string>>;
Result<IniSections> ParseIni(std::string_view text);

// Reads an environment variable (nullopt: unset). The process environment in the daemon; a map
// in tests.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
EnvLookup ProcessEnvironment();

// The credentials, or why there are none (naming the places looked at, never a key).
Result<AwsCredentials> LoadAwsCredentials(const EnvLookup& env);
// The region the environment or the profile names; empty when none does.
std::string LoadAwsRegion(const EnvLookup& env);

}  // namespace ckptfs
