#include "core/replication/wire.h"

#include <cstring>

#include "core/shared/shared_policy.h"

namespace ckptfs::replication {
namespace {

void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutU16(std::string* out, uint16_t v) {
  out->push_back(static_cast<char>(v & 0xff));
  out->push_back(static_cast<char>(v >> 8));
}
template <size_t N>
void PutBytes(std::string* out, const std::array<uint8_t, N>& bytes) {
  out->append(reinterpret_cast<const char*>(bytes.data()), N);
}
void PutString(std::string* out, const std::string& s) {
  PutU16(out, static_cast<uint16_t>(s.size()));
  out->append(s);
}

// Reads a body front to back; any read past its end makes it bad.
class Reader {
 public:
  explicit Reader(std::string_view body) : rest_(body) {}
  bool U16(uint16_t* v) {
    if (rest_.size() < 2) return Bad();
    *v = static_cast<uint16_t>(static_cast<uint8_t>(rest_[0]) |
                               (static_cast<uint16_t>(static_cast<uint8_t>(rest_[1])) << 8));
    rest_.remove_prefix(2);
    return true;
  }
  bool U64(uint64_t* v) {
    if (rest_.size() < 8) return Bad();
    *v = 0;
    for (int i = 7; i >= 0; --i) *v = (*v << 8) | static_cast<uint8_t>(rest_[i]);
    rest_.remove_prefix(8);
    return true;
  }
  template <size_t N>
  bool Bytes(std::array<uint8_t, N>* out) {
    if (rest_.size() < N) return Bad();
    std::memcpy(out->data(), rest_.data(), N);
    rest_.remove_prefix(N);
    return true;
  }
  bool String(size_t max, std::string* out) {
    if (rest_.size() < 2) return Bad();
    size_t n = static_cast<uint8_t>(rest_[0]) | (static_cast<size_t>(static_cast<uint8_t>(rest_[1])) << 8);
    rest_.remove_prefix(2);
    if (n > max || rest_.size() < n) return Bad();
    out->assign(rest_.data(), n);
    rest_.remove_prefix(n);
    return true;
  }
  // Ok when everything read fit and nothing is left over.
  Status Done(const char* what) const {
    if (bad_) return Status::Error(EPROTO, std::string(what) + ": body too short or malformed");
    if (!rest_.empty()) return Status::Error(EPROTO, std::string(what) + ": trailing bytes");
    return Status::Ok();
  }

 private:
  bool Bad() {
    bad_ = true;
    rest_ = {};
    return false;
  }
  std::string_view rest_;
  bool bad_ = false;
};

std::string Frame(Type type, const std::string& body) {
  return EncodeHeader(type, static_cast<uint32_t>(body.size())) + body;
}

// Reads the protocol version that leads the body of a `what` from a peer that is `peer`: Ok
// when it is this daemon's; EPROTONOSUPPORT naming both versions when it is another.
Status CheckVersion(Reader& r, const char* what, const char* peer) {
  uint16_t version = 0;
  if (!r.U16(&version)) return r.Done(what);
  if (version == kProtocolVersion) return Status::Ok();
  return Status::Error(EPROTONOSUPPORT, std::string(what) + ": the " + peer +
                                            " speaks replication protocol version " +
                                            std::to_string(version) + ", this daemon version " +
                                            std::to_string(kProtocolVersion));
}

Status BadNode(const char* what, const std::string& node) {
  return Status::Error(EPROTO, std::string(what) + ": invalid node name (" +
                                   std::to_string(node.size()) + " bytes)");
}

}  // namespace

const char* TypeName(Type type) {
  switch (type) {
    case Type::kChallenge: return "challenge";
    case Type::kHello: return "hello";
    case Type::kWelcome: return "welcome";
    case Type::kOffer: return "offer";
    case Type::kAccept: return "accept";
    case Type::kFull: return "full";
    case Type::kTooLarge: return "too-large";
    case Type::kData: return "data";
    case Type::kStored: return "stored";
    case Type::kDurable: return "durable";
    case Type::kCovered: return "covered";
  }
  return "unknown";
}

Result<FrameHeader> DecodeHeader(const uint8_t* bytes) {
  uint32_t length = 0;
  for (int i = 3; i >= 0; --i) length = (length << 8) | bytes[i];
  const uint8_t type = bytes[4];
  if (type < static_cast<uint8_t>(Type::kChallenge) ||
      type > static_cast<uint8_t>(Type::kCovered)) {
    return Status::Error(EPROTO, "unknown frame type " + std::to_string(type));
  }
  if (length > kMaxFrameBody) {
    return Status::Error(EPROTO, "frame body of " + std::to_string(length) + " bytes");
  }
  return FrameHeader{static_cast<Type>(type), length};
}

std::string EncodeHeader(Type type, uint32_t length) {
  std::string out;
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((length >> (8 * i)) & 0xff));
  out.push_back(static_cast<char>(type));
  return out;
}

std::string Encode(const Challenge& m) {
  std::string body;
  PutU16(&body, m.version);
  PutBytes(&body, m.nonce);
  return Frame(Type::kChallenge, body);
}

std::string Encode(const Hello& m) {
  std::string body;
  PutU16(&body, m.version);
  PutString(&body, m.node);
  PutString(&body, m.run);
  PutBytes(&body, m.nonce);
  PutBytes(&body, m.mac);
  return Frame(Type::kHello, body);
}

std::string Encode(const Welcome& m) {
  std::string body;
  PutString(&body, m.node);
  PutBytes(&body, m.mac);
  return Frame(Type::kWelcome, body);
}

std::string Encode(const Offer& m) {
  std::string body;
  PutU64(&body, m.seq);
  PutU64(&body, m.version);
  PutU64(&body, m.size);
  PutString(&body, m.path);
  PutU16(&body, static_cast<uint16_t>(m.mode & 07777));
  PutString(&body, m.renamed_from);
  return Frame(Type::kOffer, body);
}

std::string Encode(Type type, const SeqMessage& m) {
  std::string body;
  PutU64(&body, m.seq);
  return Frame(type, body);
}

Result<Challenge> DecodeChallenge(std::string_view body) {
  Challenge m;
  if (body.size() == kNonceBytes) {
    return Status::Error(EPROTONOSUPPORT,
                         "challenge: the partner speaks replication protocol version " +
                             std::to_string(kUnversionedProtocol) +
                             " (a daemon that sends no version), this daemon version " +
                             std::to_string(kProtocolVersion));
  }
  Reader r(body);
  if (Status st = CheckVersion(r, "challenge", "partner"); !st.ok()) return st;
  r.Bytes(&m.nonce);
  if (Status st = r.Done("challenge"); !st.ok()) return st;
  return m;
}

Result<Hello> DecodeHello(std::string_view body) {
  Hello m;
  Reader r(body);
  if (Status st = CheckVersion(r, "hello", "member"); !st.ok()) return st;
  r.String(policy::kMaxNodeNameLength, &m.node) &&
      r.String(policy::kIncarnationLength, &m.run) && r.Bytes(&m.nonce) && r.Bytes(&m.mac);
  if (Status st = r.Done("hello"); !st.ok()) return st;
  if (!policy::IsValidNodeName(m.node)) return BadNode("hello", m.node);
  if (!policy::IsValidIncarnation(m.run)) return Status::Error(EPROTO, "hello: invalid run");
  return m;
}

Result<Welcome> DecodeWelcome(std::string_view body) {
  Welcome m;
  Reader r(body);
  r.String(policy::kMaxNodeNameLength, &m.node) && r.Bytes(&m.mac);
  if (Status st = r.Done("welcome"); !st.ok()) return st;
  if (!policy::IsValidNodeName(m.node)) return BadNode("welcome", m.node);
  return m;
}

Result<Offer> DecodeOffer(std::string_view body) {
  Offer m;
  Reader r(body);
  uint16_t mode = 0;
  r.U64(&m.seq) && r.U64(&m.version) && r.U64(&m.size) && r.String(kMaxPathBytes, &m.path) &&
      r.U16(&mode) && r.String(kMaxPathBytes, &m.renamed_from);
  if (Status st = r.Done("offer"); !st.ok()) return st;
  if (mode > 07777) return Status::Error(EPROTO, "offer: invalid mode");
  m.mode = mode;
  if (m.seq == 0) return Status::Error(EPROTO, "offer: sequence number 0");
  if (!IsValidReplicaPath(m.path)) return Status::Error(EPROTO, "offer: invalid path");
  if (!m.renamed_from.empty() &&
      (!IsValidReplicaPath(m.renamed_from) || m.renamed_from == m.path)) {
    return Status::Error(EPROTO, "offer: invalid name renamed from");
  }
  return m;
}

Result<SeqMessage> DecodeSeq(std::string_view body) {
  SeqMessage m;
  Reader r(body);
  r.U64(&m.seq);
  if (Status st = r.Done("sequence message"); !st.ok()) return st;
  if (m.seq == 0) return Status::Error(EPROTO, "sequence number 0");
  return m;
}

bool IsValidReplicaPath(std::string_view path) {
  if (path.empty() || path.size() > kMaxPathBytes || path.front() == '/') return false;
  if (path.find('\0') != std::string_view::npos) return false;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

}  // namespace ckptfs::replication
