// S3Client: the requests the remote tier makes of an S3-compatible store, over libcurl. Requests
// are signed by libcurl (CURLOPT_AWS_SIGV4; the payload is sent as UNSIGNED-PAYLOAD, with its
// CRC32C in x-amz-checksum-crc32c, which the store verifies: the one given, else computed here
// from the file before the request, so a body changed or damaged in flight is refused), TLS
// certificates are verified (libcurl's default, never turned off). Path-style URLs under
// `endpoint` when one is given (MinIO, Ceph RGW, moto), else AWS's virtual-hosted URLs of the
// region.
//
// Each request is retried as policy::JudgeRequest says, with policy::RetryDelay between tries;
// the `RetryHook` hears each failure before its retry and may stop the retries (false); it also
// hears of the requests libcurl sent again by itself (a reused connection reset before it
// answered), which it cannot stop.
// Messages name the method, the object and S3's error code and message, never a credential;
// bytes refused for their checksum (policy::IsDigestMismatch) fail with EBADMSG.
//
// Not thread-safe: one client per thread (it keeps its connection for the next request).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/remote/aws_credentials.h"
#include "core/remote/s3_location.h"

namespace ckptfs {

struct S3Settings {
  S3Location location;
  std::string endpoint;  // "http(s)://HOST[:PORT]"; empty: AWS.
  std::string region;    // Empty: us-east-1.
  AwsCredentials credentials;
};

// Called with why a request failed, before it is retried; false: give up (the failure is
// returned).
using RetryHook = std::function<bool(const Status& failure)>;

// A part on the store: its ETag, and the CRC32C sent with it (base64 of the big-endian value, as
// S3 writes it).
struct UploadedPart {
  std::string etag;
  std::string crc32c;
};

class S3Client {
 public:
  // ENOMEM when libcurl cannot make a handle.
  static Result<std::unique_ptr<S3Client>> Make(const S3Settings& settings);
  ~S3Client();
  S3Client(const S3Client&) = delete;
  S3Client& operator=(const S3Client&) = delete;

  // Whether the bucket answers with these credentials (HeadBucket, retried a little): ok, or a
  // message fit for one line at mount (unreachable, refused credentials, no such bucket).
  Status CheckBucket();
  // Puts `size` bytes of `fd` from `offset` under `key` in one request, with their CRC32C
  // (`crc32c`, or computed when none): the object's ETag (empty when the store gives none).
  Result<std::string> PutObject(const std::string& key, int fd, uint64_t offset, uint64_t size,
                   const RetryHook& hook, std::optional<uint32_t> crc32c = std::nullopt);
  // A multipart upload (parts with their CRC32C): the upload id; each part's ETag and checksum;
  // complete (atomic: the object appears whole under `key`, or not at all), giving the object's
  // ETag (empty when the store gives none); abort (best effort, no retry).
  Result<std::string> CreateMultipartUpload(const std::string& key, const RetryHook& hook);
  Result<UploadedPart> UploadPart(const std::string& key, const std::string& upload_id,
                                  unsigned part_number, int fd, uint64_t offset, uint64_t size,
                                  const RetryHook& hook,
                                  std::optional<uint32_t> crc32c = std::nullopt);
  Result<std::string> CompleteMultipartUpload(const std::string& key,
                                              const std::string& upload_id,
                                              const std::vector<UploadedPart>& parts,
                                              const RetryHook& hook);
  void AbortMultipartUpload(const std::string& key, const std::string& upload_id);
  // The multipart uploads under `prefix` not completed nor aborted (the first 1,000 at most:
  // aborting them shows the next ones).
  struct OpenUpload {
    std::string key;
    std::string upload_id;
  };
  Result<std::vector<OpenUpload>> ListMultipartUploads(const std::string& prefix,
                                                       const RetryHook& hook);
  // The ETag of object `key` (HeadObject; empty when the store gives none); ENOENT when there is
  // none.
  Result<std::string> HeadObject(const std::string& key, const RetryHook& hook);
  // Copies the object `source` to `key` on the store (CopyObject: no byte goes over the network):
  // the new object's ETag (empty when the store gives none). ENOENT when there is no `source`.
  // S3 copies at most 5 GiB this way (policy::kMaxCopySize). No x-amz-copy-source-if-match:
  // libcurl 7.88 sorts the headers it signs by whole line, so that one, sent with
  // x-amz-copy-source, would be signed out of S3's order (and refused).
  Result<std::string> CopyObject(const std::string& source, const std::string& key,
                                 const RetryHook& hook);
  // Removes the object `key` (ok also when there is none).
  Status DeleteObject(const std::string& key, const RetryHook& hook);
  // The object's bytes (at most `max_bytes`: EFBIG beyond).
  Result<std::string> GetObject(const std::string& key, size_t max_bytes, const RetryHook& hook);
  // Bytes [offset, offset + length) of the object (a ranged GET), written to `fd` at the same
  // offset, only while the object's ETag is `if_match` (when not empty: HTTP 412 otherwise). EIO
  // when the store answers with another length; retried as uploads are (at most `max_retries`).
  Status GetRange(const std::string& key, uint64_t offset, uint64_t length, int fd,
                  const RetryHook& hook, unsigned max_retries, const std::string& if_match = "");
  // One page of ListObjectsV2 of `prefix` with delimiter '/' (`whole_tree`: without, every key
  // under it) (`token`: the page after the one that gave it; empty for the first). Keys and
  // prefixes as the store names them, decoded
  // (asked with encoding-type=url); untrusted.
  struct ListedObject {
    std::string key;
    uint64_t size = 0;
    std::string etag;
    std::string last_modified;
  };
  struct ListPage {
    std::vector<ListedObject> objects;
    std::vector<std::string> prefixes;
    std::string next_token;  // Empty: the last page.
  };
  Result<ListPage> ListObjects(const std::string& prefix, const std::string& token,
                               unsigned max_keys, const RetryHook& hook, bool whole_tree = false);

 private:
  struct Request;
  struct Answer;
  explicit S3Client(const S3Settings& settings, void* curl);
  // The URL of `key` ("" for the bucket) with `query` (already in canonical order and encoding).
  std::string UrlOf(const std::string& key, const std::string& query) const;
  // One try of `request`.
  Answer Try(const Request& request);
  // Tries `request` until it is done, fails for good, or `hook` stops it (`max_retries` at most).
  Result<Answer> Run(const Request& request, const RetryHook& hook, unsigned max_retries);

  const S3Settings settings_;
  void* curl_;  // CURL*, reused for every request (keeps the connection).
};

}  // namespace ckptfs
