#include "core/remote/s3_client.h"

#include <curl/curl.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <mutex>
#include <random>
#include <thread>

#include "core/memory/crc32c.h"
#include "core/remote/remote_policy.h"
#include "core/remote/remote_read_policy.h"
#include "core/remote/s3_xml.h"

namespace ckptfs {

struct S3Client::Request {
  const char* method = "GET";
  std::string key;     // Empty: the bucket.
  std::string query;   // Canonical: sorted, encoded, "name=value" joined with '&'.
  int fd = -1;         // The body: `size` bytes of fd from `offset` (PUT).
  uint64_t offset = 0;
  uint64_t size = 0;
  std::string body;    // Or this (POST).
  std::vector<std::string> headers;  // More headers ("Name: value"), signed with the others.
  // A 200 answer may carry an error (CompleteMultipartUpload, CopyObject): its XML is read.
  bool error_in_ok_answer = false;
  size_t max_answer = 1 << 20;
  int sink_fd = -1;  // GET: the answer's body written to sink_fd from sink_offset (not kept).
  uint64_t sink_offset = 0;
};

struct S3Client::Answer {
  Status status;  // Ok when done.
  policy::RequestVerdict verdict = policy::RequestVerdict::kFail;
  long http = 0;
  std::string body;
  std::string etag;
  uint64_t sunk = 0;  // Bytes written to Request::sink_fd.
  // Times libcurl sent the request again by itself: a reused connection died before an answer.
  unsigned resent = 0;
};

namespace {

constexpr long kConnectTimeoutMs = 5000;
constexpr long kUploadBuffer = 1 << 20;
// A transfer slower than 1 byte/s for this long is stalled: it is timed out and retried.
constexpr long kStallSeconds = 30;

void InitCurlOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

policy::Transport TransportOf(CURLcode code) {
  switch (code) {
    case CURLE_OK: return policy::Transport::kOk;
    case CURLE_OPERATION_TIMEDOUT: return policy::Transport::kTimeout;
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY: return policy::Transport::kConnectFailed;
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM: return policy::Transport::kReset;
    default: return policy::Transport::kOther;
  }
}

// Percent-encodes `key` as S3's canonical URI does: every byte but A-Z a-z 0-9 - . _ ~ and '/'.
std::string EncodeKey(const std::string& key) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(key.size());
  for (unsigned char c : key) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '.' || c == '_' || c == '~' || c == '/') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// Base64 of `bytes` (RFC 4648, padded).
std::string Base64(const unsigned char* bytes, size_t n) {
  static const char kDigits[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t b = (uint32_t{bytes[i]} << 16) |
                       (i + 1 < n ? uint32_t{bytes[i + 1]} << 8 : 0) |
                       (i + 2 < n ? uint32_t{bytes[i + 2]} : 0);
    out += kDigits[(b >> 18) & 63];
    out += kDigits[(b >> 12) & 63];
    out += i + 1 < n ? kDigits[(b >> 6) & 63] : '=';
    out += i + 2 < n ? kDigits[b & 63] : '=';
  }
  return out;
}

// `crc` as S3's x-amz-checksum-crc32c says it.
std::string Crc32cHeaderValue(uint32_t v) {
  const unsigned char big_endian[4] = {
      static_cast<unsigned char>(v >> 24), static_cast<unsigned char>(v >> 16),
      static_cast<unsigned char>(v >> 8), static_cast<unsigned char>(v)};
  return Base64(big_endian, 4);
}

// The CRC32C of `size` bytes of `fd` from `offset` (`known` when given), as S3's
// x-amz-checksum-crc32c says it.
Result<std::string> Crc32cOfRange(int fd, uint64_t offset, uint64_t size,
                                  std::optional<uint32_t> known) {
  if (known) return Crc32cHeaderValue(*known);
  std::vector<char> buffer(std::min<uint64_t>(size, kUploadBuffer));
  Crc32c crc;
  for (uint64_t done = 0; done < size;) {
    const ssize_t got = pread(fd, buffer.data(), std::min<uint64_t>(buffer.size(), size - done),
                              static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return Status::Error(got < 0 ? errno : EIO, "reading the local file");
    crc.Update(buffer.data(), static_cast<size_t>(got));
    done += static_cast<uint64_t>(got);
  }
  return Crc32cHeaderValue(crc.value());
}

struct Body {
  int fd;
  uint64_t start;
  uint64_t size;
  uint64_t sent = 0;
  int error = 0;
};

size_t ReadBody(char* buffer, size_t size, size_t count, void* data) {
  auto* body = static_cast<Body*>(data);
  const uint64_t want = std::min<uint64_t>(size * count, body->size - body->sent);
  if (want == 0) return 0;
  const ssize_t got = pread(body->fd, buffer, want, static_cast<off_t>(body->start + body->sent));
  if (got <= 0) {
    body->error = got < 0 ? errno : EIO;
    return CURL_READFUNC_ABORT;
  }
  body->sent += static_cast<uint64_t>(got);
  return static_cast<size_t>(got);
}

int SeekBody(void* data, curl_off_t offset, int origin) {
  auto* body = static_cast<Body*>(data);
  if (origin != SEEK_SET || offset < 0 || static_cast<uint64_t>(offset) > body->size) {
    return CURL_SEEKFUNC_CANTSEEK;
  }
  body->sent = static_cast<uint64_t>(offset);
  return CURL_SEEKFUNC_OK;
}

struct Sink {
  std::string* out;
  size_t max;
  bool overflow = false;
  // A successful answer's body goes to `fd` (when not -1) from `offset`; an error's XML to `out`.
  int fd = -1;
  uint64_t offset = 0;
  uint64_t* written = nullptr;
  CURL* curl = nullptr;
  int error = 0;
};

size_t WriteAnswer(char* data, size_t size, size_t count, void* user) {
  auto* sink = static_cast<Sink*>(user);
  const size_t n = size * count;
  long http = 0;
  if (sink->fd >= 0) curl_easy_getinfo(sink->curl, CURLINFO_RESPONSE_CODE, &http);
  if (sink->fd >= 0 && http >= 200 && http < 300) {
    if (*sink->written + n > sink->max) {
      sink->overflow = true;
      return 0;
    }
    for (size_t done = 0; done < n;) {
      const ssize_t put = pwrite(sink->fd, data + done, n - done,
                                 static_cast<off_t>(sink->offset + *sink->written + done));
      if (put < 0 && errno == EINTR) continue;
      if (put <= 0) {
        sink->error = put < 0 ? errno : EIO;
        return 0;
      }
      done += static_cast<size_t>(put);
    }
    *sink->written += n;
    return n;
  }
  // An error's XML (with a file sink, `max` bounds the file's bytes, not this).
  if (sink->out->size() + n > (sink->fd >= 0 ? size_t{1} << 20 : sink->max)) {
    sink->overflow = true;
    return 0;  // Aborts the transfer.
  }
  sink->out->append(data, n);
  return n;
}

size_t TakeHeader(char* data, size_t size, size_t count, void* user) {
  const size_t n = size * count;
  std::string_view line(data, n);
  constexpr std::string_view kEtag = "etag:";
  if (line.size() > kEtag.size() && line.size() < 1024) {
    std::string lower(line.substr(0, kEtag.size()));
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower == kEtag) {
      std::string_view value = line.substr(kEtag.size());
      while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) {
        value.remove_prefix(1);
      }
      while (!value.empty() &&
             (value.back() == '\r' || value.back() == '\n' || value.back() == ' ')) {
        value.remove_suffix(1);
      }
      *static_cast<std::string*>(user) = std::string(value);
    }
  }
  return n;
}

// libcurl's informational text, seen only to count the requests it sends again by itself (on a
// reused connection that died before answering); headers and data are ignored, never kept.
int WatchResends(CURL*, curl_infotype type, char* data, size_t size, void* user) {
  constexpr std::string_view kResent = "Connection died, retrying a fresh connect";
  if (type == CURLINFO_TEXT && std::string_view(data, size).substr(0, kResent.size()) == kResent) {
    ++*static_cast<unsigned*>(user);
  }
  return 0;
}

// Printable, one line, bounded: for S3's messages in ours.
std::string OneLine(std::string_view text) {
  std::string out;
  for (char c : text.substr(0, 300)) out += (c >= 0x20 && c < 0x7f) ? c : ' ';
  return out;
}

}  // namespace

Result<std::unique_ptr<S3Client>> S3Client::Make(const S3Settings& settings) {
  InitCurlOnce();
  CURL* curl = curl_easy_init();
  if (!curl) return Status::Error(ENOMEM, "remote: libcurl cannot make a handle");
  return std::unique_ptr<S3Client>(new S3Client(settings, curl));
}

S3Client::S3Client(const S3Settings& settings, void* curl) : settings_(settings), curl_(curl) {}

S3Client::~S3Client() { curl_easy_cleanup(static_cast<CURL*>(curl_)); }

std::string S3Client::UrlOf(const std::string& key, const std::string& query) const {
  const std::string& bucket = settings_.location.bucket;
  std::string url;
  if (!settings_.endpoint.empty()) {
    std::string base = settings_.endpoint;
    while (!base.empty() && base.back() == '/') base.pop_back();
    url = base + "/" + bucket + "/" + EncodeKey(key);
  } else {
    const std::string region = settings_.region.empty() ? "us-east-1" : settings_.region;
    url = bucket.find('.') == std::string::npos
              ? "https://" + bucket + ".s3." + region + ".amazonaws.com/" + EncodeKey(key)
              : "https://s3." + region + ".amazonaws.com/" + bucket + "/" + EncodeKey(key);
  }
  if (!query.empty()) url += "?" + query;
  return url;
}

S3Client::Answer S3Client::Try(const Request& request) {
  CURL* curl = static_cast<CURL*>(curl_);
  curl_easy_reset(curl);
  Answer answer;
  const std::string url = UrlOf(request.key, request.query);
  const std::string what = std::string(request.method) + " s3://" + settings_.location.bucket +
                           "/" + request.key;
  const std::string region = settings_.region.empty() ? "us-east-1" : settings_.region;
  const std::string sigv4 = "aws:amz:" + region + ":s3";
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_AWS_SIGV4, sigv4.c_str());
  curl_easy_setopt(curl, CURLOPT_USERNAME, settings_.credentials.access_key.c_str());
  curl_easy_setopt(curl, CURLOPT_PASSWORD, settings_.credentials.secret_key.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, kConnectTimeoutMs);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, kStallSeconds);
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  // The body goes at once, not after waiting for "100 Continue" (an `Expect:` header set here to
  // suppress it would be signed by libcurl and never sent, and the store would refuse it).
  curl_easy_setopt(curl, CURLOPT_EXPECT_100_TIMEOUT_MS, 0L);
  curl_slist* headers = nullptr;
  headers = curl_slist_append(headers, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
  std::string token_header;
  if (!settings_.credentials.session_token.empty()) {
    token_header = "x-amz-security-token: " + settings_.credentials.session_token;
    headers = curl_slist_append(headers, token_header.c_str());
  }
  for (const std::string& h : request.headers) headers = curl_slist_append(headers, h.c_str());
  Body body{request.fd, request.offset, request.size};
  const std::string method = request.method;
  if (method == "PUT") {
    curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(curl, CURLOPT_READFUNCTION, ReadBody);
    curl_easy_setopt(curl, CURLOPT_READDATA, &body);
    curl_easy_setopt(curl, CURLOPT_SEEKFUNCTION, SeekBody);
    curl_easy_setopt(curl, CURLOPT_SEEKDATA, &body);
    curl_easy_setopt(curl, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(request.size));
    // Reads of the file in 1 MiB (libcurl's default is 64 KiB: 16 times the calls).
    curl_easy_setopt(curl, CURLOPT_UPLOAD_BUFFERSIZE, kUploadBuffer);
  } else if (method == "POST") {
    curl_easy_setopt(curl, CURLOPT_POST, 1L);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, request.body.c_str());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE,
                     static_cast<curl_off_t>(request.body.size()));
    headers = curl_slist_append(headers, "Content-Type: application/xml");
  } else if (method == "HEAD") {
    curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  } else if (method == "DELETE") {
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, "DELETE");
  }
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  Sink sink{&answer.body, request.max_answer};
  sink.fd = request.sink_fd;
  sink.offset = request.sink_offset;
  sink.written = &answer.sunk;
  sink.curl = curl;
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, WriteAnswer);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, TakeHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &answer.etag);
  curl_easy_setopt(curl, CURLOPT_VERBOSE, 1L);
  curl_easy_setopt(curl, CURLOPT_DEBUGFUNCTION, WatchResends);
  curl_easy_setopt(curl, CURLOPT_DEBUGDATA, &answer.resent);
  char curl_error[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, curl_error);
  const CURLcode code = curl_easy_perform(curl);
  curl_slist_free_all(headers);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &answer.http);

  if (sink.overflow) {
    answer.status = Status::Error(EFBIG, what + ": the answer is larger than " +
                                             std::to_string(request.max_answer) + " bytes");
    return answer;
  }
  if (sink.error != 0) {
    answer.status = Status::Error(sink.error, what + ": writing the local file");
    return answer;
  }
  if (body.error != 0) {
    answer.status = Status::Error(body.error, what + ": reading the local file");
    return answer;
  }
  if (code != CURLE_OK) {
    const policy::Transport transport = TransportOf(code);
    answer.verdict = policy::JudgeRequest(transport, 0, "");
    answer.status = Status::Error(
        transport == policy::Transport::kConnectFailed ? EHOSTUNREACH
        : transport == policy::Transport::kTimeout     ? ETIMEDOUT
        : transport == policy::Transport::kReset       ? ECONNRESET
                                                       : EIO,
        what + ": " + (curl_error[0] ? OneLine(curl_error) : curl_easy_strerror(code)));
    return answer;
  }
  // An error answers with XML (none for HEAD); CompleteMultipartUpload may answer 200 with one.
  std::string error_code, error_message;
  if (!answer.body.empty() &&
      (answer.http >= 300 || method == "POST" || request.error_in_ok_answer)) {
    Result<S3Xml> xml = ParseS3Xml(answer.body);
    if (xml.ok() && xml->root == "Error") {
      error_code = xml->Field("Code");
      error_message = xml->Field("Message");
    }
  }
  if (answer.http >= 300 && error_code.empty()) {
    error_code = answer.http == 404 ? "NotFound" : answer.http == 403 ? "Forbidden" : "";
  }
  answer.verdict = policy::JudgeRequest(policy::Transport::kOk, answer.http, error_code);
  if (answer.verdict == policy::RequestVerdict::kDone) return answer;
  const int err = answer.http == 403                       ? EACCES
                  : answer.http == 404                     ? ENOENT
                  : policy::IsDigestMismatch(error_code) ? EBADMSG
                                                           : EIO;
  answer.status =
      Status::Error(err, what + ": HTTP " + std::to_string(answer.http) +
                             (error_code.empty() ? "" : " " + OneLine(error_code)) +
                             (error_message.empty() ? "" : ": " + OneLine(error_message)));
  return answer;
}

Result<S3Client::Answer> S3Client::Run(const Request& request, const RetryHook& hook,
                                       unsigned max_retries) {
  thread_local std::minstd_rand jitter(std::random_device{}());
  for (unsigned retry = 1;; ++retry) {
    Answer answer = Try(request);
    for (unsigned i = 0; hook && i < answer.resent; ++i) {
      (void)hook(Status::Error(ECONNRESET, std::string(request.method) + " s3://" +
                                               settings_.location.bucket + "/" + request.key +
                                               ": the connection was reset; libcurl sent the "
                                               "request again"));
    }
    if (answer.verdict == policy::RequestVerdict::kDone) return answer;
    if (answer.verdict == policy::RequestVerdict::kFail || retry > max_retries) {
      return answer.status;
    }
    if (hook && !hook(answer.status)) return answer.status;
    std::this_thread::sleep_for(
        policy::RetryDelay(retry, std::uniform_real_distribution<double>(0, 0.5)(jitter)));
  }
}

Status S3Client::CheckBucket() {
  Request request;
  request.method = "HEAD";
  Result<Answer> answer = Run(request, nullptr, policy::kCheckRetries);
  if (answer.ok()) return Status::Ok();
  const Status& st = answer.status();
  std::string hint;
  if (st.err() == ENOENT) hint = " (no such bucket)";
  if (st.err() == EACCES) hint = " (the credentials are refused, or do not reach the bucket)";
  if (st.err() == EHOSTUNREACH) hint = " (the endpoint is unreachable)";
  return Status::Error(st.err(), "remote " + settings_.location.ToString() + " at " +
                                     (settings_.endpoint.empty() ? "AWS" : settings_.endpoint) +
                                     " cannot be used: " + st.message() + hint +
                                     "; credentials from " + settings_.credentials.source);
}

Result<std::string> S3Client::PutObject(const std::string& key, int fd, uint64_t offset,
                                        uint64_t size, const RetryHook& hook,
                                        std::optional<uint32_t> crc32c) {
  Result<std::string> crc = Crc32cOfRange(fd, offset, size, crc32c);
  if (!crc.ok()) {
    return Status::Error(crc.status().err(), "PutObject " + key + ": " + crc.status().message());
  }
  Request request;
  request.method = "PUT";
  request.key = key;
  request.fd = fd;
  request.offset = offset;
  request.size = size;
  request.headers.push_back("x-amz-checksum-crc32c: " + *crc);
  Result<Answer> answer = Run(request, hook, UINT_MAX);
  if (!answer.ok()) return answer.status();
  return answer->etag;
}

Result<std::string> S3Client::CreateMultipartUpload(const std::string& key, const RetryHook& hook) {
  Request request;
  request.method = "POST";
  request.key = key;
  request.query = "uploads=";
  request.headers.push_back("x-amz-checksum-algorithm: CRC32C");
  Result<Answer> answer = Run(request, hook, UINT_MAX);
  if (!answer.ok()) return answer.status();
  Result<S3Xml> xml = ParseS3Xml(answer->body);
  if (!xml.ok()) {
    return Status::Error(EPROTO, "CreateMultipartUpload " + key + ": " + xml.status().message());
  }
  std::string id = xml->Field("UploadId");
  if (id.empty()) return Status::Error(EPROTO, "CreateMultipartUpload " + key + ": no UploadId");
  return id;
}

Result<UploadedPart> S3Client::UploadPart(const std::string& key, const std::string& upload_id,
                                          unsigned part_number, int fd, uint64_t offset,
                                          uint64_t size, const RetryHook& hook,
                                          std::optional<uint32_t> crc32c) {
  Result<std::string> crc = Crc32cOfRange(fd, offset, size, crc32c);
  if (!crc.ok()) {
    return Status::Error(crc.status().err(), "UploadPart " + key + ": " + crc.status().message());
  }
  CURL* curl = static_cast<CURL*>(curl_);
  char* escaped = curl_easy_escape(curl, upload_id.c_str(), static_cast<int>(upload_id.size()));
  if (!escaped) return Status::Error(ENOMEM, "UploadPart: cannot encode the upload id");
  Request request;
  request.method = "PUT";
  request.key = key;
  request.query = "partNumber=" + std::to_string(part_number) + "&uploadId=" + escaped;
  curl_free(escaped);
  request.fd = fd;
  request.offset = offset;
  request.size = size;
  request.headers.push_back("x-amz-checksum-crc32c: " + *crc);
  Result<Answer> answer = Run(request, hook, UINT_MAX);
  if (!answer.ok()) return answer.status();
  if (answer->etag.empty()) {
    return Status::Error(EPROTO, "UploadPart " + key + " part " + std::to_string(part_number) +
                                     ": no ETag in the answer");
  }
  return UploadedPart{answer->etag, *crc};
}

Result<std::string> S3Client::CompleteMultipartUpload(const std::string& key,
                                                      const std::string& upload_id,
                                                      const std::vector<UploadedPart>& parts,
                                                      const RetryHook& hook) {
  CURL* curl = static_cast<CURL*>(curl_);
  char* escaped = curl_easy_escape(curl, upload_id.c_str(), static_cast<int>(upload_id.size()));
  if (!escaped) {
    return Status::Error(ENOMEM, "CompleteMultipartUpload: cannot encode the upload id");
  }
  Request request;
  request.method = "POST";
  request.key = key;
  request.query = std::string("uploadId=") + escaped;
  curl_free(escaped);
  request.body = "<CompleteMultipartUpload>";
  for (size_t i = 0; i < parts.size(); ++i) {
    request.body += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>" +
                    parts[i].etag + "</ETag><ChecksumCRC32C>" + parts[i].crc32c +
                    "</ChecksumCRC32C></Part>";
  }
  request.body += "</CompleteMultipartUpload>";
  Result<Answer> answer = Run(request, hook, UINT_MAX);
  if (!answer.ok()) return answer.status();
  Result<S3Xml> xml = ParseS3Xml(answer->body);
  return xml.ok() ? xml->Field("ETag") : std::string();
}

void S3Client::AbortMultipartUpload(const std::string& key, const std::string& upload_id) {
  CURL* curl = static_cast<CURL*>(curl_);
  char* escaped = curl_easy_escape(curl, upload_id.c_str(), static_cast<int>(upload_id.size()));
  if (!escaped) return;
  Request request;
  request.method = "DELETE";
  request.key = key;
  request.query = std::string("uploadId=") + escaped;
  curl_free(escaped);
  (void)Try(request);
}

Result<std::vector<S3Client::OpenUpload>> S3Client::ListMultipartUploads(
    const std::string& prefix, const RetryHook& hook) {
  CURL* curl = static_cast<CURL*>(curl_);
  char* escaped = curl_easy_escape(curl, prefix.c_str(), static_cast<int>(prefix.size()));
  if (!escaped) return Status::Error(ENOMEM, "ListMultipartUploads: cannot encode the prefix");
  Request request;
  request.query = std::string("prefix=") + escaped + "&uploads=";
  curl_free(escaped);
  Result<Answer> answer = Run(request, hook, UINT_MAX);
  if (!answer.ok()) return answer.status();
  Result<S3Xml> xml = ParseS3Xml(answer->body);
  if (!xml.ok()) {
    return Status::Error(EPROTO, "ListMultipartUploads " + prefix + ": " + xml.status().message());
  }
  std::vector<OpenUpload> uploads;
  for (const S3Xml::Group& group : xml->groups) {
    if (group.name != "Upload") continue;
    auto key = group.fields.find("Key");
    auto id = group.fields.find("UploadId");
    if (key == group.fields.end() || id == group.fields.end() || id->second.empty()) continue;
    if (key->second.compare(0, prefix.size(), prefix) != 0) continue;  // Not asked for.
    uploads.push_back({key->second, id->second});
  }
  return uploads;
}

Result<std::string> S3Client::HeadObject(const std::string& key, const RetryHook& hook) {
  Request request;
  request.method = "HEAD";
  request.key = key;
  Result<Answer> answer = Run(request, hook, UINT_MAX);
  if (!answer.ok()) return answer.status();
  return answer->etag;
}

Result<std::string> S3Client::CopyObject(const std::string& source, const std::string& key,
                                         const RetryHook& hook) {
  Request request;
  request.method = "PUT";
  request.key = key;
  request.error_in_ok_answer = true;
  request.headers.push_back("x-amz-copy-source: /" + settings_.location.bucket + "/" +
                            EncodeKey(source));
  Result<Answer> answer = Run(request, hook, UINT_MAX);
  if (!answer.ok()) return answer.status();
  Result<S3Xml> xml = ParseS3Xml(answer->body);
  return xml.ok() ? xml->Field("ETag") : std::string();
}

Status S3Client::DeleteObject(const std::string& key, const RetryHook& hook) {
  Request request;
  request.method = "DELETE";
  request.key = key;
  Result<Answer> answer = Run(request, hook, UINT_MAX);
  if (!answer.ok() && answer.status().err() == ENOENT) return Status::Ok();
  return answer.status();
}

Result<std::string> S3Client::GetObject(const std::string& key, size_t max_bytes,
                                        const RetryHook& hook) {
  Request request;
  request.key = key;
  request.max_answer = max_bytes;
  Result<Answer> answer = Run(request, hook, policy::kCheckRetries);
  if (!answer.ok()) return answer.status();
  return std::move(answer->body);
}

Status S3Client::GetRange(const std::string& key, uint64_t offset, uint64_t length, int fd,
                          const RetryHook& hook, unsigned max_retries,
                          const std::string& if_match) {
  if (length == 0) return Status::Ok();
  Request request;
  request.key = key;
  request.headers.push_back("Range: bytes=" + std::to_string(offset) + "-" +
                            std::to_string(offset + length - 1));
  if (!if_match.empty()) request.headers.push_back("If-Match: " + if_match);
  request.sink_fd = fd;
  request.sink_offset = offset;
  request.max_answer = length;
  Result<Answer> answer = Run(request, hook, max_retries);
  if (!answer.ok()) return answer.status();
  if (answer->sunk != length) {
    return Status::Error(EIO, "GET s3://" + settings_.location.bucket + "/" + key + " bytes " +
                                  std::to_string(offset) + "+" + std::to_string(length) +
                                  ": the store sent " + std::to_string(answer->sunk));
  }
  return Status::Ok();
}

Result<S3Client::ListPage> S3Client::ListObjects(const std::string& prefix,
                                                 const std::string& token, unsigned max_keys,
                                                 const RetryHook& hook, bool whole_tree) {
  CURL* curl = static_cast<CURL*>(curl_);
  auto escape = [&](const std::string& text) -> std::optional<std::string> {
    char* escaped = curl_easy_escape(curl, text.c_str(), static_cast<int>(text.size()));
    if (!escaped) return std::nullopt;
    std::string out = escaped;
    curl_free(escaped);
    return out;
  };
  std::optional<std::string> escaped_prefix = escape(prefix);
  std::optional<std::string> escaped_token = escape(token);
  if (!escaped_prefix || !escaped_token) {
    return Status::Error(ENOMEM, "ListObjectsV2: cannot encode the prefix");
  }
  Request request;
  // Canonical order: sorted by name.
  request.query = (token.empty() ? "" : "continuation-token=" + *escaped_token + "&") +
                  std::string(whole_tree ? "" : "delimiter=%2F&") +
                  "encoding-type=url&list-type=2&max-keys=" + std::to_string(max_keys) +
                  "&prefix=" + *escaped_prefix;
  Result<Answer> answer = Run(request, hook, policy::kCheckRetries + 3);
  if (!answer.ok()) return answer.status();
  Result<S3Xml> xml = ParseS3Xml(answer->body);
  if (!xml.ok() || xml->root != "ListBucketResult") {
    return Status::Error(EPROTO, "ListObjectsV2 " + prefix + ": " +
                                     (xml.ok() ? "not a listing" : xml.status().message()));
  }
  const bool url_encoded = xml->Field("EncodingType") == "url";
  auto decode = [&](const std::string& text) -> std::optional<std::string> {
    if (!url_encoded) return text;
    return policy::UrlDecodeKey(text);
  };
  ListPage page;
  for (const S3Xml::Group& group : xml->groups) {
    auto field = [&](const char* name) {
      auto it = group.fields.find(name);
      return it == group.fields.end() ? std::string() : it->second;
    };
    if (group.name == "Contents") {
      std::optional<std::string> key = decode(field("Key"));
      if (!key) continue;  // A broken escape: no name of ours.
      ListedObject object;
      object.key = std::move(*key);
      const std::string size = field("Size");
      char* end = nullptr;
      errno = 0;
      object.size = std::strtoull(size.c_str(), &end, 10);
      if (size.empty() || *end != '\0' || errno != 0 || size.front() == '-') continue;
      object.etag = field("ETag");
      object.last_modified = field("LastModified");
      page.objects.push_back(std::move(object));
    } else if (group.name == "CommonPrefixes") {
      std::optional<std::string> common = decode(field("Prefix"));
      if (common) page.prefixes.push_back(std::move(*common));
    }
  }
  if (xml->Field("IsTruncated") == "true") {
    page.next_token = xml->Field("NextContinuationToken");
    if (page.next_token.empty()) {
      return Status::Error(EPROTO, "ListObjectsV2 " + prefix + ": truncated, with no token");
    }
  }
  return page;
}

}  // namespace ckptfs
