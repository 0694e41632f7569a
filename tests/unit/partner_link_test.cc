// Replication over real TCP on the loopback interface: a PartnerLink (the member) and a
// PartnerServer (its partner) with the real OpenSSL handshake; hostile clients on raw sockets.
#include "core/replication/partner_link.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "core/replication/partner_server.h"
#include "replication_fixture.h"

namespace ckptfs::replication {
namespace {

using namespace std::chrono_literals;

using testing_util::kRun;
using testing_util::Version;

std::string Pattern(size_t size, char seed) {
  std::string s(size, '\0');
  for (size_t i = 0; i < size; ++i) s[i] = static_cast<char>(seed + i * 7 + i / 4096);
  return s;
}

class PartnerLinkTest : public testing::Test {
 protected:
  // spdlog's registry is made on the main thread first, as the daemon's main does: its lazy
  // construction inside the (uninstrumented) library races in ThreadSanitizer's eyes otherwise.
  void SetUp() override { spdlog::default_logger(); }
  void StartPartner(uint64_t store_bytes) {
    store_ = std::make_unique<PartnerStore>(store_bytes);
    Result<std::unique_ptr<PartnerServer>> server =
        PartnerServer::Start({"n1", "127.0.0.1", 500ms}, secret_, *store_);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
    ASSERT_NE(server_->port(), 0);
  }
  PartnerAddress Address() const { return {"n1", "127.0.0.1", server_->port()}; }
  // A raw connection to the partner.
  int Dial() {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(server_->port());
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    return fd;
  }

  // A connection on which member "n2" has sent its Hello, of protocol `version`, by hand (null
  // when the partner did not challenge it).
  std::unique_ptr<Connection> HelloByHand(uint16_t version = kProtocolVersion) {
    Result<std::unique_ptr<Connection>> conn =
        Connection::Dial("127.0.0.1", server_->port(), 2s);
    if (!conn.ok()) return nullptr;
    Result<std::string> body = (*conn)->Expect(Type::kChallenge);
    if (!body.ok()) return nullptr;
    Nonce mine = *RandomNonce();
    Hello hello{"n2", kRun, mine,
                secret_.MemberProof(DecodeChallenge(*body)->nonce, mine, "n2"), version};
    if (!(*conn)->Send(Encode(hello)).ok()) return nullptr;
    return std::move(*conn);
  }

  GroupSecret secret_ = *GroupSecret::FromBytes("a secret all members of the group share");
  std::unique_ptr<PartnerStore> store_;
  std::unique_ptr<PartnerServer> server_;
};

TEST_F(PartnerLinkTest, SealedVersionsArriveWholeAndAreDroppedOnceDurable) {
  StartPartner(64 << 20);
  PartnerLink link("n0", kRun, Address(), secret_);
  const std::string big = Pattern((3 << 20) + 12345, 1);  // Several data frames.
  link.Enqueue(Version(5, big));
  link.Enqueue(Version(6, ""));
  link.Enqueue(Version(9, "tracker 9\n"));
  ASSERT_TRUE(Eventually([&] { return link.stored_through() >= 9; }));
  EXPECT_EQ(store_->Bytes({"n0", kRun}, 5), big);
  EXPECT_EQ(store_->Bytes({"n0", kRun}, 9), "tracker 9\n");
  EXPECT_EQ(store_->Totals().replicas, 3u);
  EXPECT_EQ(link.stats().replicas_stored, 3u);
  EXPECT_EQ(server_->connections_accepted(), 1u);

  link.Durable(6);
  ASSERT_TRUE(Eventually([&] { return store_->Totals().replicas == 1; }));
  EXPECT_EQ(store_->Bytes({"n0", kRun}, 9), "tracker 9\n");
  link.Durable(9);
  ASSERT_TRUE(Eventually([&] { return store_->Totals().replicas == 0; }));
  EXPECT_EQ(store_->Totals().bytes, 0u);
}

TEST_F(PartnerLinkTest, AFullPartnerHoldsVersionsBackUntilTheOwnerMakesEarlierOnesDurable) {
  StartPartner(1 << 20);
  PartnerLink link("n0", kRun, Address(), secret_);
  link.Enqueue(Version(1, Pattern(700 << 10, 1)));
  link.Enqueue(Version(2, Pattern(700 << 10, 2)));
  ASSERT_TRUE(Eventually([&] { return link.stored_through() >= 1; }));
  ASSERT_TRUE(Eventually([&] { return link.stats().offers_full >= 2; }));
  EXPECT_EQ(link.stored_through(), 1u);
  EXPECT_EQ(store_->Totals().replicas, 1u);
  // The owner made version 1 durable: the partner drops it and takes version 2.
  link.Durable(1);
  ASSERT_TRUE(Eventually([&] { return link.stored_through() >= 2; }));
  EXPECT_EQ(store_->Bytes({"n0", kRun}, 2), Pattern(700 << 10, 2));
  EXPECT_EQ(store_->Bytes({"n0", kRun}, 1), "");
}

TEST_F(PartnerLinkTest, AVersionLargerThanThePartnerMayHoldIsSkippedAndHoldsTheReplicatedPointBack) {
  StartPartner(1 << 20);
  PartnerLink link("n0", kRun, Address(), secret_);
  link.Enqueue(Version(1, "small"));
  link.Enqueue(Version(2, Pattern(2 << 20, 3)));
  link.Enqueue(Version(3, "after"));
  ASSERT_TRUE(Eventually([&] { return store_->Bytes({"n0", kRun}, 3) == "after"; }));
  EXPECT_EQ(link.stats().replicas_unsendable, 1u);
  EXPECT_EQ(link.stored_through(), 1u);
  link.Durable(2);
  EXPECT_EQ(link.stored_through(), UINT64_MAX);
}

TEST_F(PartnerLinkTest, VersionsAlreadyDurableAreNeverSent) {
  StartPartner(64 << 20);
  // Nobody listens: nothing is sent.
  PartnerLink link("n0", kRun, {"n1", "127.0.0.1", 1}, secret_);
  link.Enqueue(Version(1, "a"));
  link.Enqueue(Version(2, "b"));
  EXPECT_EQ(link.stored_through(), 0u);
  link.Durable(2);
  EXPECT_EQ(link.stored_through(), UINT64_MAX);
  EXPECT_EQ(link.stats().queued, 0u);
}

TEST_F(PartnerLinkTest, AMemberWithAnotherSecretIsRefusedAndLogged) {
  StartPartner(64 << 20);
  GroupSecret wrong = *GroupSecret::FromBytes("a secret of some other group entirely");
  PartnerLink link("n0", kRun, Address(), wrong);
  link.Enqueue(Version(1, "data"));
  ASSERT_TRUE(Eventually([&] {
    return server_->connections_refused() >= 2 && link.stats().connect_failures >= 2;
  }));
  EXPECT_EQ(server_->connections_accepted(), 0u);
  EXPECT_EQ(store_->Totals().replicas, 0u);
  EXPECT_EQ(link.stored_through(), 0u);
  EXPECT_FALSE(link.stats().connected);
}

TEST_F(PartnerLinkTest, AListenerWithoutTheSecretIsNotTrustedByTheMember) {
  // The member checks the partner's proof too: one with another secret is never sent data.
  GroupSecret other = *GroupSecret::FromBytes("a secret of some other group entirely");
  store_ = std::make_unique<PartnerStore>(1 << 20);
  Result<std::unique_ptr<PartnerServer>> server =
      PartnerServer::Start({"n1", "127.0.0.1", 500ms}, other, *store_);
  ASSERT_TRUE(server.ok());
  server_ = std::move(*server);
  PartnerLink link("n0", kRun, Address(), secret_);
  link.Enqueue(Version(1, "data"));
  ASSERT_TRUE(Eventually([&] { return link.stats().connect_failures >= 2; }));
  EXPECT_EQ(store_->Totals().replicas, 0u);
}

TEST_F(PartnerLinkTest, HostileClientsAreRefusedAndThePartnerServesOthersOn) {
  StartPartner(64 << 20);
  // Garbage instead of a hello.
  int fd = Dial();
  const char junk[] = "GET / HTTP/1.1\r\n\r\n";
  ASSERT_GT(write(fd, junk, sizeof junk), 0);
  // A frame header announcing 4 GiB.
  int fd2 = Dial();
  std::string huge = EncodeHeader(Type::kHello, 0xffffffff);
  ASSERT_GT(write(fd2, huge.data(), huge.size()), 0);
  // Silence: dropped after the handshake timeout.
  int fd3 = Dial();
  // A hello whose proof is wrong.
  int fd4 = Dial();
  std::string hello = Encode(Hello{"n9", kRun, {}, {}});
  ASSERT_GT(write(fd4, hello.data(), hello.size()), 0);
  ASSERT_TRUE(Eventually([&] { return server_->connections_refused() == 4; }));
  for (int f : {fd, fd2, fd3, fd4}) close(f);

  PartnerLink link("n0", kRun, Address(), secret_);
  link.Enqueue(Version(1, "still served"));
  ASSERT_TRUE(Eventually([&] { return link.stored_through() >= 1; }));
  EXPECT_EQ(store_->Bytes({"n0", kRun}, 1), "still served");
}

TEST_F(PartnerLinkTest, AnAuthenticatedMemberBreakingTheProtocolLosesOnlyItsConnection) {
  StartPartner(1 << 20);
  // The handshake done by hand, then an offer of 10 bytes followed by 20.
  std::unique_ptr<Connection> conn = HelloByHand();
  ASSERT_TRUE(conn);
  ASSERT_TRUE(conn->Expect(Type::kWelcome).ok());
  ASSERT_TRUE(conn->Send(Encode(Offer{1, 1, 10, "a"})).ok());
  ASSERT_TRUE(conn->Expect(Type::kAccept).ok());
  EXPECT_EQ(store_->Totals().bytes, 10u);
  ASSERT_TRUE(conn->SendData(std::string(20, 'x').data(), 20).ok());
  // The partner ends the connection and gives the reservation back.
  EXPECT_FALSE(conn->ReadHeader().ok());
  ASSERT_TRUE(Eventually([&] { return store_->Totals().bytes == 0; }));

  PartnerLink good("n0", kRun, Address(), secret_);
  good.Enqueue(Version(1, "fine"));
  ASSERT_TRUE(Eventually([&] { return good.stored_through() >= 1; }));
  EXPECT_EQ(store_->Bytes({"n2", kRun}, 1), "");
  EXPECT_EQ(store_->Totals().bytes, 4u);
}

TEST_F(PartnerLinkTest, AMemberThatStallsInTheMiddleOfAReplicaLosesItsReservation) {
  store_ = std::make_unique<PartnerStore>(1 << 20);
  Result<std::unique_ptr<PartnerServer>> server =
      PartnerServer::Start({"n1", "127.0.0.1", 500ms, 300ms}, secret_, *store_);
  ASSERT_TRUE(server.ok());
  server_ = std::move(*server);
  std::unique_ptr<Connection> conn = HelloByHand();
  ASSERT_TRUE(conn);
  ASSERT_TRUE(conn->Expect(Type::kWelcome).ok());
  ASSERT_TRUE(conn->Send(Encode(Offer{1, 1, 1000, "a"})).ok());
  ASSERT_TRUE(conn->Expect(Type::kAccept).ok());
  ASSERT_TRUE(conn->SendData("abc", 3).ok());
  EXPECT_EQ(store_->Totals().bytes, 1000u);
  // Nothing more comes: the partner gives up on it.
  ASSERT_TRUE(Eventually([&] { return store_->Totals().bytes == 0; }));
  EXPECT_FALSE(conn->ReadHeader().ok());
}

TEST_F(PartnerLinkTest, AVersionWhoseBytesCannotBeReadIsSkipped) {
  StartPartner(1 << 20);
  auto unreadable = std::make_shared<Outgoing>();
  unreadable->seq = 1;
  unreadable->path = "a";
  unreadable->size = 10;
  unreadable->read = [](uint64_t, size_t, char*) -> Result<size_t> {
    return Status::Error(EIO, "the backing file is gone");
  };
  PartnerLink link("n0", kRun, Address(), secret_);
  link.Enqueue(unreadable);
  link.Enqueue(Version(2, "next"));
  ASSERT_TRUE(Eventually([&] { return store_->Bytes({"n0", kRun}, 2) == "next"; }));
  EXPECT_EQ(link.stats().replicas_unsendable, 1u);
  EXPECT_EQ(link.stored_through(), 0u);
  ASSERT_TRUE(Eventually([&] { return store_->Totals().bytes == 4; }));
}

TEST_F(PartnerLinkTest, ThePartnerLearnsWhatItCoversOnlyOnceItHoldsEverythingUpToIt) {
  StartPartner(1 << 20);
  PartnerLink link("n0", kRun, Address(), secret_);
  const OwnerRun n0{"n0", kRun};
  link.Enqueue(Version(2, "two"));
  link.Coverable(3);
  ASSERT_TRUE(Eventually([&] { return store_->CoveredOf(n0) == 3u; }));
  // A version too large for the partner holds the point below it until it is durable.
  link.Enqueue(Version(5, std::string((1 << 20) + 1, 'x')));
  link.Enqueue(Version(6, "six"));
  link.Coverable(7);
  ASSERT_TRUE(Eventually([&] { return store_->Bytes(n0, 6) == "six"; }));
  ASSERT_TRUE(Eventually([&] { return store_->CoveredOf(n0) == 4u; }));
  link.Durable(5);
  ASSERT_TRUE(Eventually([&] { return store_->CoveredOf(n0) == 7u; }));
}

TEST_F(PartnerLinkTest, ALinkReconnectsWhenThePartnerComesBack) {
  StartPartner(64 << 20);
  PartnerLink link("n0", kRun, Address(), secret_);
  link.Enqueue(Version(1, "one"));
  ASSERT_TRUE(Eventually([&] { return link.stored_through() >= 1; }));
  server_.reset();
  link.Enqueue(Version(2, "two"));
  ASSERT_TRUE(Eventually([&] { return !link.stats().connected; }));
  EXPECT_EQ(link.stored_through(), 1u);
  // The partner restarts on the same port (as a new mount publishes its new port; the member
  // then makes a new link).
  PartnerStore store(64 << 20);
  PartnerServerSettings settings{"n1", "127.0.0.1", 500ms};
  Result<std::unique_ptr<PartnerServer>> again = PartnerServer::Start(settings, secret_, store);
  ASSERT_TRUE(again.ok());
  PartnerLink relinked("n0", kRun, {"n1", "127.0.0.1", (*again)->port()}, secret_);
  relinked.Enqueue(Version(2, "two"));
  ASSERT_TRUE(Eventually([&] { return relinked.stored_through() >= 2; }));
  EXPECT_EQ(store.Bytes({"n0", kRun}, 2), "two");
}

TEST_F(PartnerLinkTest, APeerOfAnotherProtocolVersionIsRefusedAtConnectNamingBothVersions) {
  // A member meets a partner of the daemons that sent no version (its challenge is the nonce
  // alone): it refuses it, and says why with both versions.
  int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(listener, 8), 0);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  std::thread unversioned_partner([listener] {
    const std::string challenge =
        EncodeHeader(Type::kChallenge, kNonceBytes) + std::string(kNonceBytes, 'n');
    // A member that went away meanwhile is not written to (no SIGPIPE).
    for (int fd; (fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC)) >= 0; close(fd)) {
      (void)send(fd, challenge.data(), challenge.size(), MSG_NOSIGNAL);
    }
  });
  {
    PartnerLink link("n0", kRun, {"n1", "127.0.0.1", ntohs(addr.sin_port)}, secret_);
    link.Enqueue(Version(1, "data"));
    EXPECT_TRUE(Eventually([&] { return link.stats().connect_failures >= 2; }));
    const PartnerLinkStats stats = link.stats();
    EXPECT_FALSE(stats.connected);
    EXPECT_NE(stats.last_error.find("partner speaks replication protocol version 1 "),
              std::string::npos)
        << stats.last_error;
    EXPECT_NE(stats.last_error.find("this daemon version " + std::to_string(kProtocolVersion)),
              std::string::npos)
        << stats.last_error;
    EXPECT_EQ(link.stored_through(), 0u);
  }
  shutdown(listener, SHUT_RDWR);
  unversioned_partner.join();
  close(listener);

  // A partner meets a member of a later version that holds the secret: refused and counted.
  StartPartner(1 << 20);
  std::unique_ptr<Connection> conn = HelloByHand(kProtocolVersion + 1);
  ASSERT_TRUE(conn);
  EXPECT_FALSE(conn->Expect(Type::kWelcome).ok());
  ASSERT_TRUE(Eventually([&] { return server_->connections_refused() == 1; }));
  EXPECT_EQ(server_->connections_accepted(), 0u);
  EXPECT_EQ(store_->Totals().replicas, 0u);
}

}  // namespace
}  // namespace ckptfs::replication
