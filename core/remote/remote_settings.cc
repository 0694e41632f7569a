#include "core/remote/remote_settings.h"

namespace ckptfs {

Result<S3Settings> RemoteSettingsOf(const Config& config, const EnvLookup& env) {
  Result<S3Location> location = S3Location::Parse(config.remote);
  if (!location.ok()) return location.status();
  Result<AwsCredentials> credentials = LoadAwsCredentials(env);
  if (!credentials.ok()) return credentials.status();
  return S3Settings{*location, config.remote_endpoint,
                    config.remote_region.empty() ? LoadAwsRegion(env) : config.remote_region,
                    *credentials};
}

Status CheckRemote(const S3Settings& settings) {
  Result<std::unique_ptr<S3Client>> client = S3Client::Make(settings);
  if (!client.ok()) return client.status();
  return (*client)->CheckBucket();
}

}  // namespace ckptfs
