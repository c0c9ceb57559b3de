#include "core/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/excerpt.h"

namespace ringguard {

namespace {

const char* kindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

Status bad(const std::string& what, const std::string& path, const std::string& problem) {
  return Status(StatusCode::kInvalidArgument, what + " '" + excerpt(path, 200) + "' " + problem);
}

Status checkStat(const struct stat& st, const std::string& what, const std::string& path, size_t maxBytes) {
  if (!S_ISREG(st.st_mode))
    return bad(what, path, std::string("is ") + kindOf(st.st_mode) + ": expected a regular file");
  if (static_cast<unsigned long long>(st.st_size) > maxBytes) {
    return bad(what, path,
               "is " + std::to_string(st.st_size) + " bytes, above the limit of " + std::to_string(maxBytes));
  }
  return Status::ok();
}

}  // namespace

Status readRegularFile(const std::string& path, const std::string& what, size_t maxBytes, std::string* out) {
  if (path.find('\0') != std::string::npos) return bad(what, path, "holds a NUL byte");
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return bad(what, path, std::string("cannot be read: ") + std::strerror(errno));
  RINGGUARD_RETURN_IF_ERROR(checkStat(st, what, path, maxBytes));
  // O_NONBLOCK: should the path have become a FIFO since the stat, the open returns instead of waiting for
  // a writer; the fstat below then refuses it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return bad(what, path, std::string("cannot be opened: ") + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (::fstat(fd, &st) != 0) return bad(what, path, std::string("cannot be read: ") + std::strerror(errno));
  RINGGUARD_RETURN_IF_ERROR(checkStat(st, what, path, maxBytes));
  std::string text;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return bad(what, path, std::string("cannot be read: ") + std::strerror(errno));
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > maxBytes) {  // it grew since the stat
      return bad(what, path, "is larger than the limit of " + std::to_string(maxBytes) + " bytes");
    }
  }
  *out = std::move(text);
  return Status::ok();
}

}  // namespace ringguard
