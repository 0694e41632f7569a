// The remote tier's settings from a mount's options and the AWS environment, and the check made
// at mount that the store can be used with them.
#pragma once

#include "core/base/config.h"
#include "core/base/status.h"
#include "core/remote/aws_credentials.h"
#include "core/remote/s3_client.h"

namespace ckptfs {

// The S3 settings of `config` (its remote options; credentials and, unless given, the region
// from `env`), or why there are none.
Result<S3Settings> RemoteSettingsOf(const Config& config, const EnvLookup& env);

// Whether the bucket answers with the credentials: ok, or one line saying why not (unreachable
// endpoint, refused credentials, no such bucket), naming where the credentials came from.
Status CheckRemote(const S3Settings& settings);

}  // namespace ckptfs
