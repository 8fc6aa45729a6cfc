// tuttirun's check that the program can run before any rank starts (program_error in
// tools/tuttirun/spawn.hpp): found or not, executable or not, in PATH as execvpe() looks.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "tuttirun/spawn.hpp"

using namespace tuttirun;

namespace {

// A directory of its own under $TMPDIR, removed at the end of the test.
struct scratch_dir {
  std::filesystem::path path;
  scratch_dir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "tuttirun-spawn-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~scratch_dir() { std::filesystem::remove_all(path); }

  // A file `name` holding a shell script, with permissions `mode`.
  std::string file(const std::string& name, mode_t mode) {
    const std::filesystem::path p = path / name;
    std::ofstream(p) << "#!/bin/sh\nexit 0\n";
    REQUIRE(::chmod(p.c_str(), mode) == 0);
    return p.string();
  }
};

}  // namespace

TEST_SUITE_BEGIN("unit");

TEST_CASE("tuttirun spawn: a program named by a path must be an executable file") {
  scratch_dir d;
  CHECK(program_error(d.file("run-me", 0755), nullptr) == 0);
  CHECK(program_error(d.file("read-me", 0644), nullptr) == EACCES);
  CHECK(program_error((d.path / "missing").string(), nullptr) == ENOENT);
  CHECK(program_error((d.path / "missing" / "deeper").string(), nullptr) == ENOENT);
  CHECK(program_error(d.path.string(), nullptr) == EACCES);  // a directory
  CHECK(program_error(d.file("plain", 0644) + "/below", nullptr) == ENOTDIR);
  CHECK(program_error("", nullptr) == ENOENT);
  // A path is not looked for in PATH.
  CHECK(program_error("./tuttirun-spawn-surely-missing", d.path.c_str()) == ENOENT);
}

TEST_CASE("tuttirun spawn: a bare name is looked for in PATH in order") {
  scratch_dir d;
  std::filesystem::create_directory(d.path / "a");
  std::filesystem::create_directory(d.path / "b");
  const std::string a = (d.path / "a").string(), b = (d.path / "b").string();
  d.file("a/prog", 0644);  // found first, but not executable: passed over
  d.file("b/prog", 0755);
  d.file("a/only-readable", 0644);
  CHECK(program_error("prog", (a + ":" + b).c_str()) == 0);
  CHECK(program_error("prog", a.c_str()) == EACCES);
  CHECK(program_error("only-readable", (a + ":" + b).c_str()) == EACCES);
  CHECK(program_error("missing", (a + ":" + b).c_str()) == ENOENT);
  CHECK(program_error("prog", "/nonexistent-tuttirun-dir") == ENOENT);
  CHECK(program_error("prog", (d.file("a/not-a-dir", 0644) + ":" + b).c_str()) == 0);
}

TEST_CASE("tuttirun spawn: an empty PATH entry is the current directory and no PATH is /bin:/usr/bin") {
  scratch_dir d;
  d.file("here", 0755);
  const std::filesystem::path before = std::filesystem::current_path();
  std::filesystem::current_path(d.path);
  const int in_cwd = program_error("here", ":/nonexistent-tuttirun-dir");
  const int in_cwd_last = program_error("here", "/nonexistent-tuttirun-dir:");
  const int not_in_path = program_error("here", "/nonexistent-tuttirun-dir");
  std::filesystem::current_path(before);
  CHECK(in_cwd == 0);
  CHECK(in_cwd_last == 0);
  CHECK(not_in_path == ENOENT);
  CHECK(program_error("sh", nullptr) == 0);
  CHECK(program_error("tuttirun-spawn-surely-missing", nullptr) == ENOENT);
}

TEST_CASE("tuttirun spawn: the status of a program that cannot run is a shell's") {
  CHECK(exit_code_of_exec_error(ENOENT) == 127);
  CHECK(exit_code_of_exec_error(EACCES) == 126);
  CHECK(exit_code_of_exec_error(ENOTDIR) == 126);
}

TEST_SUITE_END();
