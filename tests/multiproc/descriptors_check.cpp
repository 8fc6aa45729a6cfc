// The fault tests' descriptor check (descriptors.hpp), checked where it used to go wrong: in a
// directory whose path contains "tutti", with a file open there (as ctest's log is when the
// build lives under a clone named tutti), a memfd named as tutti's shm segment and a socket, it
// must count the memfd and the socket it was given, never the file.
//   tutti_descriptors_check DIR   (DIR must contain "tutti"; it is created, and left empty)
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <set>
#include <string>

#include "descriptors.hpp"

namespace {
int passed = 0, failed = 0;
void check(bool ok, const std::string& what) {
  ++(ok ? passed : failed);
  std::printf("%s %s\n", ok ? "PASS" : "FAIL", what.c_str());
}
}  // namespace

int main(int argc, char** argv) {
  using tutti::test::transport_descriptors;
  namespace fs = std::filesystem;
  if (argc != 2 || std::string(argv[1]).find("tutti") == std::string::npos) {
    std::fprintf(stderr, "usage: %s DIR (a directory whose path contains \"tutti\")\n", argv[0]);
    return 2;
  }
  const fs::path dir = argv[1];
  fs::create_directories(dir);
  const fs::path log = dir / "LastTest.log.tmp";
  const int file = ::open(log.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
  check(file >= 0, "opened " + log.string());
  const int before = transport_descriptors();
  check(before == 0, "with a file open under " + dir.string() + ": " + std::to_string(before) +
                         " transport descriptors (want 0)");
  const int segment = ::memfd_create("tutti:descriptor-check", MFD_CLOEXEC);
  const int other = ::memfd_create("other:tutti", MFD_CLOEXEC);  // not tutti's segment
  const int sock = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const std::set<std::uint64_t> sockets{tutti::test::socket_inode(sock)};
  check(segment >= 0 && other >= 0 && sock >= 0 && *sockets.begin() != 0, "made a memfd, another memfd and a socket");
  check(transport_descriptors() == 1, "the memfd named tutti:... is counted, the file and the other memfd are not: " +
                                          std::to_string(transport_descriptors()));
  check(transport_descriptors(sockets) == 2, "with the socket's inode, the socket too: " +
                                                 std::to_string(transport_descriptors(sockets)));
  int substring = 0;  // the old check: every link target containing "tutti"
  for (const auto& t : tutti::test::descriptor_targets()) substring += t.find("tutti") != std::string::npos;
  std::printf("the old check, a substring match, counts %d here\n", substring);
  check(substring >= 3, "(and the old check counted the file and the other memfd as well)");
  ::close(segment);
  check(transport_descriptors(sockets) == 1, "closed memfd: no longer counted");
  ::close(sock);
  check(transport_descriptors(sockets) == 0, "closed socket: no longer counted");
  ::close(other);
  ::close(file);
  fs::remove(log);
  std::printf("descriptor check: %d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
