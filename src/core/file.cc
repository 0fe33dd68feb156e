#include "tessera/file.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tessera {
namespace {

const char* KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

StatusOr<std::string> ReadFile(const std::string& path, std::size_t max_bytes) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below).
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) {
    const int err = errno;
    if (err == ENXIO) return InvalidInputError("cannot read " + path + ": not a regular file");
    return NotFoundError("cannot read " + path + ": " + std::strerror(err));
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) {
    return NotFoundError("cannot read " + path + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    return InvalidInputError("cannot read " + path + ": it is " + std::string(KindOf(st.st_mode)) +
                             ", expected a regular file");
  }
  const auto too_big = [&] {
    return InvalidInputError("cannot read " + path + ": larger than the limit of " +
                             std::to_string(max_bytes) + " bytes");
  };
  if (static_cast<std::uint64_t>(st.st_size) > max_bytes) return too_big();
  // /proc and /sys files report size 0: read in chunks up to the bound either way.
  std::string text;
  text.reserve(static_cast<std::size_t>(st.st_size));
  char chunk[1 << 16];
  for (;;) {
    const ssize_t n = read(fd.get(), chunk, sizeof(chunk));
    if (n < 0) {
      if (errno == EINTR) continue;
      return DataLossError("cannot read " + path + ": " + std::strerror(errno));
    }
    if (n == 0) break;
    if (text.size() + static_cast<std::size_t>(n) > max_bytes) return too_big();
    text.append(chunk, static_cast<std::size_t>(n));
  }
  return text;
}

}  // namespace tessera
