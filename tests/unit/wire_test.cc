// The replication protocol's frames (core/replication/wire.h): every message round-trips, and
// hostile bytes are refused with EPROTO, never read past their end.
#include "core/replication/wire.h"

#include <gtest/gtest.h>

#include <random>

namespace ckptfs::replication {
namespace {

// The body of a whole frame, after checking its header.
std::string BodyOf(const std::string& frame, Type type) {
  EXPECT_GE(frame.size(), kHeaderBytes);
  Result<FrameHeader> header = DecodeHeader(reinterpret_cast<const uint8_t*>(frame.data()));
  EXPECT_TRUE(header.ok()) << header.status().ToString();
  EXPECT_EQ(header->type, type);
  EXPECT_EQ(header->length, frame.size() - kHeaderBytes);
  return frame.substr(kHeaderBytes);
}

Nonce Filled(uint8_t v) {
  Nonce n;
  n.fill(v);
  return n;
}

constexpr const char* kRun = "0123456789abcdef";

TEST(WireTest, EveryMessageRoundTrips) {
  Result<Challenge> c = DecodeChallenge(BodyOf(Encode(Challenge{Filled(7)}), Type::kChallenge));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->nonce, Filled(7));

  Result<Hello> h =
      DecodeHello(BodyOf(Encode(Hello{"n-1.a_b", kRun, Filled(1), Filled(2)}), Type::kHello));
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->node, "n-1.a_b");
  EXPECT_EQ(h->run, kRun);
  EXPECT_EQ(h->nonce, Filled(1));
  EXPECT_EQ(h->mac, Filled(2));

  Result<Welcome> w = DecodeWelcome(BodyOf(Encode(Welcome{"n2", Filled(3)}), Type::kWelcome));
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->node, "n2");
  EXPECT_EQ(w->mac, Filled(3));

  Offer offer{42, 7, (1ull << 40) + 3, "ckpt/step_10/__0_0.distcp"};
  Result<Offer> o = DecodeOffer(BodyOf(Encode(offer), Type::kOffer));
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->seq, 42u);
  EXPECT_EQ(o->version, 7u);
  EXPECT_EQ(o->size, (1ull << 40) + 3);
  EXPECT_EQ(o->path, offer.path);
  EXPECT_EQ(o->renamed_from, "") << "a file version";
  // A rename sent as a commit marker's replica names the file it was renamed from.
  Offer renamed{43, 7, 120, "ckpt/step_10/.metadata", 0640, "ckpt/step_10/.metadata.tmp"};
  Result<Offer> r = DecodeOffer(BodyOf(Encode(renamed), Type::kOffer));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->path, renamed.path);
  EXPECT_EQ(r->mode, 0640u);
  EXPECT_EQ(r->renamed_from, renamed.renamed_from);

  for (Type t : {Type::kAccept, Type::kFull, Type::kTooLarge, Type::kStored, Type::kDurable,
                 Type::kCovered}) {
    Result<SeqMessage> s = DecodeSeq(BodyOf(Encode(t, SeqMessage{0x0102030405060708}), t));
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->seq, 0x0102030405060708u);
  }
}

TEST(WireTest, HeadersWithUnknownTypesOrHugeBodiesAreRefused) {
  auto decode = [](std::string header) {
    return DecodeHeader(reinterpret_cast<const uint8_t*>(header.data()));
  };
  EXPECT_EQ(decode(EncodeHeader(static_cast<Type>(0), 1)).status().err(), EPROTO);
  EXPECT_EQ(decode(EncodeHeader(static_cast<Type>(12), 1)).status().err(), EPROTO);
  EXPECT_EQ(decode(EncodeHeader(static_cast<Type>(255), 1)).status().err(), EPROTO);
  EXPECT_EQ(decode(EncodeHeader(Type::kData, kMaxFrameBody + 1)).status().err(), EPROTO);
  EXPECT_EQ(decode(EncodeHeader(Type::kData, 0xffffffff)).status().err(), EPROTO);
  EXPECT_TRUE(decode(EncodeHeader(Type::kData, kMaxFrameBody)).ok());
}

TEST(WireTest, ShortAndOverlongBodiesAreRefused) {
  const std::string hello =
      BodyOf(Encode(Hello{"n1", kRun, Filled(1), Filled(2)}), Type::kHello);
  for (size_t n = 0; n < hello.size(); ++n) {
    EXPECT_EQ(DecodeHello(hello.substr(0, n)).status().err(), EPROTO) << n;
  }
  EXPECT_EQ(DecodeHello(hello + "x").status().err(), EPROTO);
  const std::string offer = BodyOf(Encode(Offer{1, 1, 1, "a/b"}), Type::kOffer);
  for (size_t n = 0; n < offer.size(); ++n) {
    EXPECT_EQ(DecodeOffer(offer.substr(0, n)).status().err(), EPROTO) << n;
  }
  EXPECT_EQ(DecodeOffer(offer + "x").status().err(), EPROTO);
  EXPECT_EQ(DecodeSeq("1234567").status().err(), EPROTO);
  EXPECT_EQ(DecodeSeq("123456789").status().err(), EPROTO);
  const std::string challenge = BodyOf(Encode(Challenge{Filled(1)}), Type::kChallenge);
  for (size_t n : {size_t{0}, size_t{1}, size_t{2}, challenge.size() - 1}) {
    EXPECT_EQ(DecodeChallenge(challenge.substr(0, n)).status().err(), EPROTO) << n;
  }
  EXPECT_EQ(DecodeChallenge(challenge + "x").status().err(), EPROTO);
}

TEST(WireTest, APeerOfAnotherProtocolVersionIsRefusedNamingBothVersions) {
  auto names_both = [](const Status& st, uint16_t theirs) {
    return st.message().find("speaks replication protocol version " + std::to_string(theirs)) !=
               std::string::npos &&
           st.message().find("this daemon version " + std::to_string(kProtocolVersion)) !=
               std::string::npos;
  };
  // A partner of the daemons that sent no version: its challenge is the nonce alone.
  Status st = DecodeChallenge(std::string(kNonceBytes, 'x')).status();
  EXPECT_EQ(st.err(), EPROTONOSUPPORT);
  EXPECT_TRUE(names_both(st, kUnversionedProtocol)) << st.message();
  // Later versions, whatever their bodies hold after the version.
  const uint16_t later = kProtocolVersion + 1;
  st = DecodeChallenge(BodyOf(Encode(Challenge{Filled(1), later}), Type::kChallenge)).status();
  EXPECT_EQ(st.err(), EPROTONOSUPPORT);
  EXPECT_TRUE(names_both(st, later)) << st.message();
  const std::string later_le{static_cast<char>(later & 0xff), static_cast<char>(later >> 8)};
  st = DecodeChallenge(later_le + std::string(100, 'y')).status();
  EXPECT_EQ(st.err(), EPROTONOSUPPORT);
  EXPECT_TRUE(names_both(st, later)) << st.message();
  st = DecodeHello(BodyOf(Encode(Hello{"n1", kRun, Filled(1), Filled(2), later}), Type::kHello))
           .status();
  EXPECT_EQ(st.err(), EPROTONOSUPPORT);
  EXPECT_TRUE(names_both(st, later)) << st.message();
  EXPECT_NE(st.message().find("member"), std::string::npos) << st.message();
  st = DecodeHello(std::string("\xff\xff", 2)).status();
  EXPECT_EQ(st.err(), EPROTONOSUPPORT);
  EXPECT_TRUE(names_both(st, 0xffff)) << st.message();
}

TEST(WireTest, AStringLengthBeyondTheBodyIsRefused) {
  // A node name claiming 64 bytes with 3 behind it.
  const std::string version =
      BodyOf(Encode(Hello{"n1", kRun, Filled(1), Filled(2)}), Type::kHello).substr(0, 2);
  std::string body = version + std::string("\x40\x00", 2) + "abc";
  EXPECT_EQ(DecodeHello(body).status().err(), EPROTO);
  // A path length beyond kMaxPathBytes is refused before it is read.
  std::string offer = BodyOf(Encode(Offer{1, 1, 1, "a"}), Type::kOffer);
  offer[24] = '\xff';
  offer[25] = '\xff';
  offer += std::string(0xffff, 'a');
  EXPECT_EQ(DecodeOffer(offer).status().err(), EPROTO);
}

TEST(WireTest, InvalidNodeNamesRunsPathsAndSequenceNumbersAreRefused) {
  for (const char* run : {"", "0123456789abcde", "0123456789ABCDEF", "0123456789abcdeg"}) {
    std::string body = BodyOf(Encode(Hello{"n1", run, Filled(1), Filled(2)}), Type::kHello);
    EXPECT_EQ(DecodeHello(body).status().err(), EPROTO) << run;
  }
  for (const char* node : {"", ".hidden", "a/b", "a b", "..", "n\n"}) {
    std::string body = BodyOf(Encode(Hello{node, kRun, Filled(1), Filled(2)}), Type::kHello);
    EXPECT_EQ(DecodeHello(body).status().err(), EPROTO) << node;
    body = BodyOf(Encode(Welcome{node, Filled(2)}), Type::kWelcome);
    EXPECT_EQ(DecodeWelcome(body).status().err(), EPROTO) << node;
  }
  EXPECT_EQ(DecodeHello(BodyOf(Encode(Hello{std::string(65, 'a'), kRun, Filled(1), Filled(2)}),
                               Type::kHello)).status().err(),
            EPROTO);
  for (std::string path : {std::string(""), std::string("/etc/passwd"), std::string("a/../b"),
                           std::string(".."), std::string("a//b"), std::string("a/./b"),
                           std::string("a/"), std::string("a\0b", 3),
                           std::string(kMaxPathBytes + 1, 'a')}) {
    std::string body = BodyOf(Encode(Offer{1, 1, 1, path}), Type::kOffer);
    EXPECT_EQ(DecodeOffer(body).status().err(), EPROTO) << path;
    if (path.empty()) continue;  // No name renamed from: a file version.
    body = BodyOf(Encode(Offer{1, 1, 1, "a", 0644, path}), Type::kOffer);
    EXPECT_EQ(DecodeOffer(body).status().err(), EPROTO) << "renamed from " << path;
  }
  EXPECT_EQ(DecodeOffer(BodyOf(Encode(Offer{1, 1, 1, "a", 0644, "a"}), Type::kOffer))
                .status()
                .err(),
            EPROTO)
      << "renamed from its own name";
  EXPECT_EQ(DecodeOffer(BodyOf(Encode(Offer{0, 1, 1, "a"}), Type::kOffer)).status().err(), EPROTO);
  EXPECT_EQ(DecodeSeq(std::string(8, '\0')).status().err(), EPROTO);
  // A file's mode travels with its offer; bits beyond the permissions are refused.
  std::string body = BodyOf(Encode(Offer{1, 1, 1, "a", 0750}), Type::kOffer);
  Result<Offer> offer = DecodeOffer(body);
  ASSERT_TRUE(offer.ok()) << offer.status().ToString();
  EXPECT_EQ(offer->mode, 0750u);
  body[body.size() - 3] = '\x10';  // 010000 | 0750: S_IFIFO's bit (before renamed_from's length).
  EXPECT_EQ(DecodeOffer(body).status().err(), EPROTO);
}

TEST(WireTest, ValidPathsAreAccepted) {
  EXPECT_TRUE(IsValidReplicaPath("a"));
  EXPECT_TRUE(IsValidReplicaPath("ckpt/iter_0000010/.metadata"));
  EXPECT_TRUE(IsValidReplicaPath("..a/b.."));
  EXPECT_TRUE(IsValidReplicaPath(std::string(kMaxPathBytes, 'a')));
}

TEST(WireTest, RandomBytesNeverCrashADecoder) {
  std::mt19937_64 rng(20261204);
  for (int i = 0; i < 20000; ++i) {
    std::string body(rng() % 200, '\0');
    for (char& c : body) c = static_cast<char>(rng());
    (void)DecodeChallenge(body);
    (void)DecodeHello(body);
    (void)DecodeWelcome(body);
    (void)DecodeOffer(body);
    (void)DecodeSeq(body);
    if (body.size() >= kHeaderBytes) (void)DecodeHeader(reinterpret_cast<const uint8_t*>(body.data()));
  }
}

}  // namespace
}  // namespace ckptfs::replication
