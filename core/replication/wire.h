// The replication protocol's messages and their framing on a byte stream.
//
// A frame is a 5-byte header (body length, u32 little-endian; type, u8) and its body. Every
// frame comes from the network, so it is untrusted: bodies are bounded (kMaxFrameBody), decoded
// exactly (no trailing bytes), and names and paths are validated before anyone uses them.
//
// A connection, member (the owner of versions) to partner:
//   partner: Challenge{version, nonce}   member: Hello{version, node, run, nonce, mac}
//   partner: Welcome{node, mac}          (member_auth.h: each proves it holds the secret)
// Each side refuses a peer whose protocol version is not its own (kProtocolVersion): the member
// at the Challenge, the partner at the Hello; the version leads both bodies, so that any version
// can read it.
// then, any number of times, member: Offer{seq, version, size, path, mode, renamed_from}, answered
// by
//   partner: Accept{seq} (the bytes are reserved: member sends Data frames of exactly `size`
//            bytes in all, then partner: Stored{seq}), Full{seq} (try again later) or
//            TooLarge{seq} (never fits); and member: Durable{seq} (drop my replicas up to seq),
//   and Covered{seq} (everything I sealed up to seq is held by you or durable: what a partner
//   needs to know before it completes a dead member's commits, core/replication/stand_in.h).
// `run` names the member's process (its journal): a member that restarts under the same node
// name numbers its versions from 1 again, so a partner keys replicas by node, run and seq.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/base/status.h"

namespace ckptfs::replication {

// The protocol this daemon speaks. 1: the daemons that sent no version (their Challenge is the
// nonce alone, a length no later Challenge may have); 2: versions sent, an Offer carries the
// file's mode; 3: an Offer carries the name a commit marker was renamed from (a rename sent as
// the marker's replica), empty for a file version.
inline constexpr uint16_t kProtocolVersion = 3;
inline constexpr uint16_t kUnversionedProtocol = 1;

inline constexpr size_t kHeaderBytes = 5;
// Largest data frame body, and largest body of any frame.
inline constexpr size_t kMaxDataChunk = 1u << 20;
inline constexpr size_t kMaxFrameBody = kMaxDataChunk;
// Largest path of a replicated version.
inline constexpr size_t kMaxPathBytes = 4096;
inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kMacBytes = 32;
using Nonce = std::array<uint8_t, kNonceBytes>;
using Mac = std::array<uint8_t, kMacBytes>;

enum class Type : uint8_t {
  kChallenge = 1,
  kHello = 2,
  kWelcome = 3,
  kOffer = 4,
  kAccept = 5,
  kFull = 6,
  kTooLarge = 7,
  kData = 8,
  kStored = 9,
  kDurable = 10,
  kCovered = 11,
};
const char* TypeName(Type type);

struct FrameHeader {
  Type type = Type::kChallenge;
  uint32_t length = 0;
};
// The header of `bytes` (kHeaderBytes of them): EPROTO for an unknown type or a body longer than
// kMaxFrameBody.
Result<FrameHeader> DecodeHeader(const uint8_t* bytes);
std::string EncodeHeader(Type type, uint32_t length);

struct Challenge {
  Nonce nonce{};
  uint16_t version = kProtocolVersion;
};
struct Hello {
  std::string node;
  std::string run;  // policy::IsValidIncarnation.
  Nonce nonce{};
  Mac mac{};
  uint16_t version = kProtocolVersion;
};
struct Welcome {
  std::string node;
  Mac mac{};
};
struct Offer {
  uint64_t seq = 0;
  uint64_t version = 0;
  uint64_t size = 0;
  std::string path;
  uint32_t mode = 0644;  // The file's permission bits (at most 07777).
  // A rename to the commit marker `path` (its content the renamed file's): the name it was renamed
  // from. Empty for a file version.
  std::string renamed_from = {};
};
// Accept, Full, TooLarge, Stored, Durable and Covered carry a sequence number only.
struct SeqMessage {
  uint64_t seq = 0;
};

// Whole frames (header and body).
std::string Encode(const Challenge& m);
std::string Encode(const Hello& m);
std::string Encode(const Welcome& m);
std::string Encode(const Offer& m);
std::string Encode(Type type, const SeqMessage& m);

// Decoders of a body of the type they name: EPROTO with the reason for anything malformed
// (short, trailing bytes, an invalid node name, run, path or renamed_from, a zero sequence
// number).
// DecodeChallenge and DecodeHello: EPROTONOSUPPORT, naming both versions, for a peer of another
// protocol version than kProtocolVersion (a Challenge of the nonce alone: kUnversionedProtocol),
// whatever the rest of its body.
Result<Challenge> DecodeChallenge(std::string_view body);
Result<Hello> DecodeHello(std::string_view body);
Result<Welcome> DecodeWelcome(std::string_view body);
Result<Offer> DecodeOffer(std::string_view body);
Result<SeqMessage> DecodeSeq(std::string_view body);

// A path a member may replicate: relative, 1-kMaxPathBytes bytes, no NUL, no empty, "." or ".."
// component.
bool IsValidReplicaPath(std::string_view path);

}  // namespace ckptfs::replication
