// kharness_test_child: a misbehaving child for tests/subprocess_test.cpp. Mode by argv[1]:
//   echo               stdin -> stdout
//   exit N             exit with code N
//   segv | abort       die of SIGSEGV / SIGABRT (no core file)
//   hang               sleep forever, ignoring SIGTERM (tests the SIGKILL escalation)
//   flood-stderr N     write N MiB to stderr: "flood-stderr begin\n" ... "flood-stderr end\n"
//   flood-stdout N     write N MiB to stdout
//   ignore-stdin       exit 0 at once without reading stdin
//   grandchild-hang    print the pid of a forked grandchild that sleeps forever (ignoring
//                      SIGTERM) holding the pipes, then exit 0
//   grandchild-setsid  the same, but the grandchild leaves the process group (setsid) and
//                      sleeps 60 s
//   env NAME           print the variable's value (or "<unset>")
// Plain POSIX only: no kharness code.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// N MiB in 1 MiB chunks; the first starts with "<name> begin\n", the last ends with "<name> end\n".
int flood(int fd, long mib, const char* name) {
  std::string chunk(1 << 20, 'x');
  for (size_t i = 63; i < chunk.size(); i += 64) chunk[i] = '\n';
  for (long i = 0; i < mib; ++i) {
    std::string c = chunk;
    if (i == 0) {
      std::string begin = std::string(name) + " begin\n";
      c.replace(0, begin.size(), begin);
    }
    if (i == mib - 1) {
      std::string end = std::string("\n") + name + " end\n";
      c.replace(c.size() - end.size(), end.size(), end);
    }
    if (!write_all(fd, c.data(), c.size())) return 1;
  }
  return 0;
}

[[noreturn]] void sleep_forever() {
  while (true) ::pause();
}

int grandchild(bool leave_group) {
  int ready[2];  // the grandchild says when it is set up, so that the parent exits after that
  if (::pipe(ready) != 0) return 1;
  pid_t pid = ::fork();
  if (pid < 0) return 1;
  if (pid == 0) {
    ::close(ready[0]);
    if (leave_group) ::setsid();
    ::signal(SIGTERM, SIG_IGN);
    ::close(ready[1]);
    if (leave_group) {
      ::sleep(60);
      _exit(0);
    }
    sleep_forever();
  }
  ::close(ready[1]);
  char byte;
  while (::read(ready[0], &byte, 1) < 0 && errno == EINTR) {
  }
  std::printf("%d\n", static_cast<int>(pid));
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  rlimit no_core{0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);
  if (argc < 2) {
    std::fprintf(stderr, "usage: kharness_test_child MODE [ARG]\n");
    return 2;
  }
  std::string mode = argv[1];
  const char* arg = argc > 2 ? argv[2] : "0";

  if (mode == "echo") {
    char buf[1 << 16];
    while (true) {
      ssize_t n = ::read(0, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return n == 0 ? 0 : 1;
      if (!write_all(1, buf, static_cast<size_t>(n))) return 1;
    }
  }
  if (mode == "exit") return std::atoi(arg);
  if (mode == "segv") {
    ::raise(SIGSEGV);
    return 100;
  }
  if (mode == "abort") std::abort();
  if (mode == "hang") {
    ::signal(SIGTERM, SIG_IGN);
    sleep_forever();
  }
  if (mode == "flood-stderr") return flood(2, std::atol(arg), "flood-stderr");
  if (mode == "flood-stdout") return flood(1, std::atol(arg), "flood-stdout");
  if (mode == "ignore-stdin") return 0;
  if (mode == "grandchild-hang") return grandchild(false);
  if (mode == "grandchild-setsid") return grandchild(true);
  if (mode == "env") {
    const char* value = std::getenv(arg);
    std::printf("%s", value ? value : "<unset>");
    return 0;
  }
  std::fprintf(stderr, "kharness_test_child: unknown mode %s\n", mode.c_str());
  return 2;
}
