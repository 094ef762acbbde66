#include "engine/comm/rendezvous.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <set>
#include <thread>
#include <utility>

namespace fulcrum::engine {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// ---------------------------------------------------------------------------------------------
// The launcher's environment

struct Launcher {
    const char* name;
    const char* rank;
    const char* size;
    const char* local_rank;
};

// Innermost launcher first (rendezvous.h says why).
constexpr Launcher kLaunchers[] = {
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
    {"SLURM", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
};

Result<int> read_variable(const EnvironmentLookup& lookup, const Launcher& launcher,
                          const char* variable) {
    const char* text = lookup(variable);
    if (text == nullptr) {
        return Error{ErrorCode::invalid_input,
                     std::string(variable) + " is not set, though " + launcher.rank +
                         " is; is this process started by " + launcher.name + "?"};
    }
    const char* end = text + std::strlen(text);
    int value = -1;
    const auto [stop, ec] = std::from_chars(text, end, value);
    if (ec != std::errc() || stop != end || stop == text || value < 0) {
        return Error{ErrorCode::invalid_input, std::string(variable) + "='" + text +
                                                   "' is not a non-negative integer (set by " +
                                                   launcher.name + ")"};
    }
    return value;
}

bool launched_by(const EnvironmentLookup& lookup, const Launcher& launcher) {
    // RANK alone may be a job script's own variable; torchrun always sets WORLD_SIZE beside it
    // (collectors/inject/rank_environment.cpp decides the same way).
    return lookup(launcher.rank) != nullptr &&
           (std::strcmp(launcher.rank, "RANK") != 0 || lookup(launcher.size) != nullptr);
}

// ---------------------------------------------------------------------------------------------
// Specs

struct Spec {
    enum class Kind { file, tcp } kind = Kind::file;
    std::string text;  // as given, for messages
    std::string path;  // file:
    std::string host;  // tcp:
    std::string port;
};

Error bad_spec(std::string_view spec, const std::string& problem) {
    return Error{ErrorCode::invalid_input,
                 "rendezvous '" + std::string(spec) + "': " + problem +
                     "; use file:PATH (a path every rank sees) or tcp:HOST:PORT (rank 0's address "
                     "and a free port)"};
}

Result<Spec> parse_spec(std::string_view text) {
    Spec spec;
    spec.text = std::string(text);
    if (text.starts_with("file:")) {
        spec.path = std::string(text.substr(5));
        if (spec.path.empty()) {
            return bad_spec(text, "no path after 'file:'");
        }
        return spec;
    }
    if (!text.starts_with("tcp:")) {
        return bad_spec(text, "not a rendezvous spec");
    }
    spec.kind = Spec::Kind::tcp;
    const std::string_view address = text.substr(4);
    const std::size_t colon = address.rfind(':');
    if (colon == std::string_view::npos) {
        return bad_spec(text, "no ':PORT' after the host");
    }
    std::string_view host = address.substr(0, colon);
    const std::string_view port = address.substr(colon + 1);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
        host = host.substr(1, host.size() - 2);  // an IPv6 literal, "[::1]"
    }
    if (host.empty()) {
        return bad_spec(text, "no host before the port");
    }
    int number = 0;
    const auto [stop, ec] = std::from_chars(port.data(), port.data() + port.size(), number);
    if (port.empty() || ec != std::errc() || stop != port.data() + port.size() || number < 1 ||
        number > 65535) {
        return bad_spec(text, "'" + std::string(port) + "' is not a port (1 to 65535)");
    }
    spec.host = std::string(host);
    spec.port = std::string(port);
    return spec;
}

// ---------------------------------------------------------------------------------------------
// Frames: what the file holds and what goes over the socket. 16 bytes, little-endian:
//   magic "FULCRDV1", then two u32 —
//   file header:   world size, blob length     (then the blob)
//   tcp hello:     rank, world size            (rank > 0 to rank 0)
//   tcp answer:    status, length              (then the blob, or the refusal's message)

constexpr std::array<unsigned char, 8> kMagic = {'F', 'U', 'L', 'C', 'R', 'D', 'V', '1'};
constexpr std::size_t kFrameBytes = 16;
constexpr std::uint32_t kMaxBlob = 1u << 20;
constexpr std::uint32_t kMaxMessage = 4096;
enum : std::uint32_t { kAccepted = 0, kRefused = 1 };

struct Frame {
    std::uint32_t first = 0;
    std::uint32_t second = 0;
};

std::array<std::byte, kFrameBytes> encode(Frame frame) {
    std::array<std::byte, kFrameBytes> bytes{};
    for (std::size_t i = 0; i < kMagic.size(); ++i) {
        bytes[i] = std::byte(kMagic[i]);
    }
    for (int i = 0; i < 4; ++i) {
        bytes[8 + i] = std::byte((frame.first >> (8 * i)) & 0xffu);
        bytes[12 + i] = std::byte((frame.second >> (8 * i)) & 0xffu);
    }
    return bytes;
}

bool has_magic(std::span<const std::byte> bytes) {
    return bytes.size() >= kMagic.size() &&
           std::equal(kMagic.begin(), kMagic.end(), bytes.begin(),
                      [](unsigned char m, std::byte b) { return std::byte(m) == b; });
}

// The frame in `bytes` (at least kFrameBytes long, magic already checked).
Frame decode(std::span<const std::byte> bytes) {
    Frame frame;
    for (int i = 0; i < 4; ++i) {
        frame.first |= std::uint32_t(bytes[8 + i]) << (8 * i);
        frame.second |= std::uint32_t(bytes[12 + i]) << (8 * i);
    }
    return frame;
}

// The start of what a foreign file or server sent, readable in a message.
std::string printable_prefix(std::span<const std::byte> bytes) {
    std::string text;
    for (std::size_t i = 0; i < std::min<std::size_t>(bytes.size(), 24); ++i) {
        const auto c = static_cast<unsigned char>(bytes[i]);
        text += c >= 0x20 && c < 0x7f ? char(c) : '.';
    }
    return text;
}

// ---------------------------------------------------------------------------------------------
// Time and system helpers

// "30 s", "0.2 s", for messages.
std::string seconds(milliseconds duration) {
    char text[32];
    std::snprintf(text, sizeof text, "%g s", double(duration.count()) / 1000.0);
    return text;
}

int poll_timeout(Clock::time_point deadline) {
    const auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now()).count();
    return int(std::clamp<long long>(left, 0, INT_MAX));
}

// Sleeps before the next poll of a file or connection attempt: 1 ms, doubling to 100 ms, never
// past the deadline.
void back_off(milliseconds& delay, Clock::time_point deadline) {
    std::this_thread::sleep_for(std::min<Clock::duration>(delay, deadline - Clock::now()));
    delay = std::min(delay * 2, milliseconds(100));
}

class FileDescriptor {
public:
    explicit FileDescriptor(int fd = -1) : fd_(fd) {}
    FileDescriptor(FileDescriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
    FileDescriptor& operator=(FileDescriptor&& other) noexcept {
        std::swap(fd_, other.fd_);
        return *this;
    }
    ~FileDescriptor() {
        if (fd_ >= 0) {
            ::close(fd_);
        }
    }
    int get() const { return fd_; }
    explicit operator bool() const { return fd_ >= 0; }
    // Closes now, for the callers that need close()'s answer (NFS reports late write errors
    // there).
    int close() { return ::close(std::exchange(fd_, -1)); }

private:
    int fd_;
};

std::string errno_text(int error) {
    return std::strerror(error);
}

// ---------------------------------------------------------------------------------------------
// file:PATH

Status write_all(int fd, std::span<const std::byte> bytes) {
    while (!bytes.empty()) {
        const ssize_t n = ::write(fd, bytes.data(), bytes.size());
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            return Error{ErrorCode::io, errno_text(errno)};
        }
        bytes = bytes.subspan(std::size_t(n));
    }
    return {};
}

Status publish_file(const Spec& spec, int world_size, std::span<const std::byte> blob) {
    const std::string& path = spec.path;
    struct stat existing {};
    if (::stat(path.c_str(), &existing) == 0) {
        return Error{ErrorCode::io,
                     "the rendezvous file " + path +
                         " already exists, from an earlier run or another job; rank 0 does not "
                         "replace it, since ranks that started first may have read it already. "
                         "Delete it, or put the job id into the path"};
    }
    if (errno != ENOENT) {
        return Error{ErrorCode::io,
                     "rank 0 cannot use the rendezvous file " + path + ": " + errno_text(errno)};
    }
    // A temporary file in the same folder, so that rename() is atomic: a rank that polls sees
    // nothing or the whole file, never a part of it.
    std::string temporary = path + ".XXXXXX";
    FileDescriptor fd(::mkstemp(temporary.data()));
    if (!fd) {
        return Error{ErrorCode::io, "rank 0 cannot create a file next to " + path + ": " +
                                        errno_text(errno) +
                                        " (does the folder exist, and is it writable?)"};
    }
    auto failed = [&](const std::string& what, const std::string& reason) -> Status {
        ::unlink(temporary.c_str());
        return Error{ErrorCode::io, "rank 0 cannot " + what + ": " + reason};
    };
    const auto header = encode({std::uint32_t(world_size), std::uint32_t(blob.size())});
    if (auto status = write_all(fd.get(), header); !status) {
        return failed("write " + temporary, status.error().message);
    }
    if (auto status = write_all(fd.get(), blob); !status) {
        return failed("write " + temporary, status.error().message);
    }
    // Durable before it becomes visible: a rank on another node must not read a file whose
    // data the server has not stored yet.
    if (::fsync(fd.get()) != 0) {
        return failed("flush " + temporary, errno_text(errno));
    }
    if (fd.close() != 0) {
        return failed("write " + temporary, errno_text(errno));
    }
    if (::rename(temporary.c_str(), path.c_str()) != 0) {
        return failed("rename " + temporary + " to " + path, errno_text(errno));
    }
    return {};
}

// A file's bytes; more than a rendezvous file can hold is read only as far as that limit, so
// the caller sees a damaged file rather than this allocating a huge one.
Result<std::vector<std::byte>> read_whole(int fd) {
    struct stat status {};
    if (::fstat(fd, &status) != 0) {
        return Error{ErrorCode::io, errno_text(errno)};
    }
    constexpr std::size_t limit = kFrameBytes + kMaxBlob + 1;
    std::vector<std::byte> bytes(
        std::min(std::size_t(std::max<off_t>(status.st_size, 0)) + 1, limit));
    std::size_t size = 0;
    while (size < bytes.size()) {
        const ssize_t n = ::read(fd, bytes.data() + size, bytes.size() - size);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            return Error{ErrorCode::io, errno_text(errno)};
        }
        if (n == 0) {
            break;
        }
        size += std::size_t(n);
    }
    bytes.resize(size);
    return bytes;
}

Result<std::vector<std::byte>> read_published_file(const Spec& spec, int rank, int world_size,
                                                   milliseconds timeout) {
    const std::string& path = spec.path;
    const auto deadline = Clock::now() + timeout;
    milliseconds delay(1);
    std::string incomplete;  // what the last look found, when the file was there but short
    for (;;) {
        FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
        if (!fd && errno != ENOENT) {
            return Error{ErrorCode::io, "rank " + std::to_string(rank) +
                                            " cannot read the rendezvous file " + path + ": " +
                                            errno_text(errno)};
        }
        if (fd) {
            auto bytes = read_whole(fd.get());
            if (!bytes) {
                return Error{ErrorCode::io, "rank " + std::to_string(rank) +
                                                " cannot read the rendezvous file " + path + ": " +
                                                bytes.error().message};
            }
            const std::size_t size = bytes->size();
            if (size >= kMagic.size() && !has_magic(*bytes)) {
                return Error{ErrorCode::corrupt,
                             path + " is not a Fulcrum rendezvous file (it starts with '" +
                                 printable_prefix(*bytes) +
                                 "'); is the path used by something else?"};
            }
            if (size >= kFrameBytes) {
                const Frame header = decode(*bytes);
                if (header.second > kMaxBlob || size > kFrameBytes + header.second) {
                    return Error{ErrorCode::corrupt,
                                 "the rendezvous file " + path + " is damaged (" +
                                     std::to_string(size) + " bytes, its header says " +
                                     std::to_string(header.second) + " after the header)"};
                }
                if (int(header.first) != world_size) {
                    return Error{ErrorCode::invalid_input,
                                 "rank " + std::to_string(rank) + " runs in a world of " +
                                     std::to_string(world_size) + " ranks, but rank 0 wrote " +
                                     path + " for a world of " + std::to_string(header.first) +
                                     "; do all ranks come from one launch?"};
                }
                if (size == kFrameBytes + header.second) {
                    return std::vector<std::byte>(bytes->begin() + kFrameBytes, bytes->end());
                }
                incomplete = " (it exists but holds " + std::to_string(size) + " of " +
                             std::to_string(kFrameBytes + header.second) + " bytes)";
            } else {
                incomplete = " (it exists but holds only " + std::to_string(size) + " bytes)";
            }
        }
        if (Clock::now() >= deadline) {
            return Error{ErrorCode::io, "rank " + std::to_string(rank) + " waited " +
                                            seconds(timeout) + " for the rendezvous file " + path +
                                            " written by rank 0" + incomplete +
                                            "; is rank 0 running, and is the path on a shared "
                                            "file system?"};
        }
        back_off(delay, deadline);
    }
}

// ---------------------------------------------------------------------------------------------
// tcp:HOST:PORT

enum class Io { done, closed, timed_out, failed };

struct IoResult {
    Io outcome = Io::done;
    std::size_t bytes = 0;  // transferred before the outcome
    int error = 0;          // errno, for Io::failed
};

// Moves exactly `size` bytes over a non-blocking socket, or says why not. `transfer(done)` is
// one recv or send of what is left after `done` bytes (what it moved, or -1 with errno); between
// partial transfers it waits for `ready_for` (POLLIN or POLLOUT) until the deadline.
template <typename Transfer>
IoResult transfer_exact(int fd, std::size_t size, short ready_for, Clock::time_point deadline,
                        Transfer transfer) {
    IoResult result;
    while (result.bytes < size) {
        const ssize_t n = transfer(result.bytes);
        if (n > 0) {
            result.bytes += std::size_t(n);
            continue;
        }
        if (n == 0 && ready_for == POLLIN) {
            result.outcome = Io::closed;
            return result;
        }
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
            result.outcome = Io::failed;
            result.error = errno;
            return result;
        }
        pollfd wait{fd, ready_for, 0};
        const int ready = ::poll(&wait, 1, poll_timeout(deadline));
        if (ready == 0) {
            result.outcome = Io::timed_out;
            return result;
        }
        if (ready < 0 && errno != EINTR) {
            result.outcome = Io::failed;
            result.error = errno;
            return result;
        }
    }
    return result;
}

// A peer that closes before out.size() bytes is Io::closed.
IoResult read_exact(int fd, std::span<std::byte> out, Clock::time_point deadline) {
    return transfer_exact(fd, out.size(), POLLIN, deadline, [&](std::size_t done) {
        return ::recv(fd, out.data() + done, out.size() - done, 0);
    });
}

IoResult write_exact(int fd, std::span<const std::byte> bytes, Clock::time_point deadline) {
    // MSG_NOSIGNAL: a peer that went away is an error to report, not a SIGPIPE.
    return transfer_exact(fd, bytes.size(), POLLOUT, deadline, [&](std::size_t done) {
        return ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    });
}

std::string describe_ranks(const std::set<int>& ranks) {
    std::string text;
    int listed = 0;
    for (int rank : ranks) {
        if (listed == 8) {
            return text + " and " + std::to_string(ranks.size() - 8) + " more";
        }
        text += (listed++ == 0 ? "" : ", ") + std::to_string(rank);
    }
    return text;
}

// Rank 0 listens on every interface: HOST in the spec is how the other ranks reach it, and a
// name that resolves to a loopback address on rank 0's own node (Debian maps the host name to
// 127.0.1.1) would otherwise hide the server from every other node. An IPv6 socket that also
// accepts IPv4 comes first, when the system has IPv6.
Result<FileDescriptor> listen_on(const Spec& spec) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    addrinfo* list = nullptr;
    if (const int rc = ::getaddrinfo(nullptr, spec.port.c_str(), &hints, &list); rc != 0) {
        return Error{ErrorCode::io,
                     "rank 0 cannot listen on port " + spec.port + ": " + ::gai_strerror(rc)};
    }
    std::vector<const addrinfo*> candidates;
    for (const addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
        candidates.push_back(ai);
    }
    std::stable_partition(candidates.begin(), candidates.end(),
                          [](const addrinfo* ai) { return ai->ai_family == AF_INET6; });
    int last_error = EADDRNOTAVAIL;
    for (const addrinfo* ai : candidates) {
        FileDescriptor fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
        if (!fd) {
            last_error = errno;
            continue;
        }
        const int yes = 1, no = 0;
        // SO_REUSEADDR: the port of the previous run may still be in TIME_WAIT.
        ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
        if (ai->ai_family == AF_INET6) {
            ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof no);
        }
        if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) == 0 &&
            ::listen(fd.get(), SOMAXCONN) == 0) {
            ::freeaddrinfo(list);
            return fd;
        }
        last_error = errno;
    }
    ::freeaddrinfo(list);
    return Error{ErrorCode::io, "rank 0 cannot listen on port " + spec.port +
                                    " for the rendezvous: " + errno_text(last_error) +
                                    " (is another program using it? choose another port)"};
}

Status serve_tcp(const Spec& spec, int world_size, std::span<const std::byte> blob,
                 milliseconds timeout) {
    auto listener = listen_on(spec);
    if (!listener) {
        return listener.error();
    }
    const auto deadline = Clock::now() + timeout;
    std::set<int> waiting;
    for (int rank = 1; rank < world_size; ++rank) {
        waiting.insert(rank);
    }
    while (!waiting.empty()) {
        pollfd wait{listener->get(), POLLIN, 0};
        const int ready = ::poll(&wait, 1, poll_timeout(deadline));
        if (ready < 0 && errno != EINTR) {
            return Error{ErrorCode::io, "rank 0 cannot wait for connections on port " + spec.port +
                                            ": " + errno_text(errno)};
        }
        if (ready <= 0) {
            if (Clock::now() >= deadline) {
                return Error{ErrorCode::io,
                             "rank 0 waited " + seconds(timeout) + " on port " + spec.port +
                                 " for rank(s) " + describe_ranks(waiting) + " of " +
                                 std::to_string(world_size) +
                                 " to fetch the rendezvous id; are they running, and do they "
                                 "reach this node as " +
                                 spec.host + "?"};
            }
            continue;
        }
        FileDescriptor client(
            ::accept4(listener->get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
        if (!client) {
            continue;  // the connection went away before it was accepted
        }
        // One client at a time: a rank sends its hello as soon as it connects, so a client
        // that says nothing for 5 s is not a rank and is dropped.
        const auto client_deadline = std::min(deadline, Clock::now() + std::chrono::seconds(5));
        std::array<std::byte, kFrameBytes> hello{};
        if (read_exact(client.get(), hello, client_deadline).outcome != Io::done ||
            !has_magic(hello)) {
            continue;  // not a Fulcrum rank (a port scanner, a health check): ignore it
        }
        const Frame asked = decode(hello);
        std::string refusal;
        if (int(asked.second) != world_size) {
            refusal = "rank " + std::to_string(asked.first) + " runs in a world of " +
                      std::to_string(asked.second) + " ranks, rank 0 in a world of " +
                      std::to_string(world_size) + "; do all ranks come from one launch?";
        } else if (asked.first == 0) {
            refusal = "two processes claim rank 0 of the rendezvous on port " + spec.port +
                      "; do all ranks come from one launch?";
        } else if (asked.first >= std::uint32_t(world_size)) {
            refusal = "rank " + std::to_string(asked.first) + " is not in a world of " +
                      std::to_string(world_size);
        }
        if (!refusal.empty()) {
            const std::string_view message(refusal.data(),
                                           std::min<std::size_t>(refusal.size(), kMaxMessage));
            write_exact(client.get(), encode({kRefused, std::uint32_t(message.size())}),
                        client_deadline);
            write_exact(client.get(), std::as_bytes(std::span(message)), client_deadline);
            return Error{ErrorCode::invalid_input, refusal};
        }
        if (write_exact(client.get(), encode({kAccepted, std::uint32_t(blob.size())}),
                        client_deadline)
                    .outcome == Io::done &&
            write_exact(client.get(), blob, client_deadline).outcome == Io::done) {
            waiting.erase(int(asked.first));  // a rank that retries is served again
        }
    }
    return {};
}

// Connects to HOST:PORT before `deadline`; on failure says why in `last_error`.
FileDescriptor connect_to(const Spec& spec, Clock::time_point deadline, std::string& last_error,
                          bool& unresolvable) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* list = nullptr;
    if (const int rc = ::getaddrinfo(spec.host.c_str(), spec.port.c_str(), &hints, &list);
        rc != 0) {
        last_error = std::string("cannot resolve ") + spec.host + ": " + ::gai_strerror(rc);
        unresolvable = rc != EAI_AGAIN;  // only a busy resolver is worth asking again
        return FileDescriptor();
    }
    FileDescriptor connected;
    for (const addrinfo* ai = list; ai != nullptr && !connected; ai = ai->ai_next) {
        FileDescriptor fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                                   ai->ai_protocol));
        if (!fd) {
            last_error = errno_text(errno);
            continue;
        }
        if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) == 0) {
            connected = std::move(fd);
            break;
        }
        if (errno != EINPROGRESS) {
            last_error = errno_text(errno);
            continue;
        }
        // A non-blocking connect, so that an unreachable host costs the deadline at most, not
        // the kernel's two minutes of SYN retries.
        pollfd wait{fd.get(), POLLOUT, 0};
        int ready;
        do {
            ready = ::poll(&wait, 1, poll_timeout(deadline));
        } while (ready < 0 && errno == EINTR);
        int error = 0;
        socklen_t length = sizeof error;
        if (ready == 0) {
            last_error = "connecting timed out";
        } else if (ready < 0) {
            last_error = errno_text(errno);
        } else if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &length) != 0 ||
                   error != 0) {
            last_error = errno_text(error != 0 ? error : errno);
        } else {
            connected = std::move(fd);
        }
    }
    ::freeaddrinfo(list);
    return connected;
}

Result<std::vector<std::byte>> fetch_tcp(const Spec& spec, int rank, int world_size,
                                         milliseconds timeout) {
    const std::string server = spec.host + ":" + spec.port;
    const std::string who = "rank " + std::to_string(rank);
    const auto deadline = Clock::now() + timeout;
    const auto foreign = [&](std::span<const std::byte> answer) {
        return Error{ErrorCode::corrupt,
                     server + " is not a Fulcrum rendezvous server (it answered '" +
                         printable_prefix(answer) + "'); is another program using port " +
                         spec.port + "?"};
    };
    const auto silent = [&] {
        return Error{ErrorCode::io, who + " connected to " + server +
                                        ", but no complete answer came within " + seconds(timeout) +
                                        "; is something other than Fulcrum's rank 0 listening "
                                        "there?"};
    };
    milliseconds delay(1);
    std::string last_error = "no answer";
    for (;;) {
        bool unresolvable = false;
        FileDescriptor fd = connect_to(spec, deadline, last_error, unresolvable);
        if (unresolvable) {
            return Error{ErrorCode::io, who + ": rendezvous '" + spec.text + "': " + last_error};
        }
        if (fd) {
            const auto hello = encode({std::uint32_t(rank), std::uint32_t(world_size)});
            std::array<std::byte, kFrameBytes> header{};
            const IoResult sent = write_exact(fd.get(), hello, deadline);
            const IoResult got = sent.outcome == Io::done ? read_exact(fd.get(), header, deadline)
                                                          : IoResult{Io::closed, 0, 0};
            if (got.outcome == Io::done) {
                if (!has_magic(header)) {
                    return foreign(header);
                }
                const Frame answer = decode(header);
                const std::uint32_t limit = answer.first == kRefused ? kMaxMessage : kMaxBlob;
                if ((answer.first != kAccepted && answer.first != kRefused) ||
                    answer.second > limit) {
                    return foreign(header);
                }
                std::vector<std::byte> payload(answer.second);
                const IoResult body = read_exact(fd.get(), payload, deadline);
                if (body.outcome == Io::timed_out) {
                    return silent();
                }
                if (body.outcome != Io::done) {
                    return Error{ErrorCode::io,
                                 who + ": " + server + " closed the connection after " +
                                     std::to_string(body.bytes) + " of " +
                                     std::to_string(answer.second) + " bytes of the rendezvous id"};
                }
                if (answer.first == kRefused) {
                    return Error{ErrorCode::invalid_input,
                                 "rank 0 refused " + who + ": " +
                                     std::string(reinterpret_cast<const char*>(payload.data()),
                                                 payload.size())};
                }
                return payload;
            }
            if (got.outcome == Io::timed_out) {
                return got.bytes == 0 ? silent() : foreign(std::span(header).first(got.bytes));
            }
            if (got.bytes > 0) {
                return foreign(std::span(header).first(got.bytes));
            }
            // Closed or reset before a byte came back: rank 0 may be restarting; try again.
            last_error = server + " closed the connection without answering";
        }
        if (Clock::now() >= deadline) {
            return Error{ErrorCode::io, who + " waited " + seconds(timeout) +
                                            " to reach the rendezvous server of rank 0 at " +
                                            server + " (last error: " + last_error +
                                            "); is rank 0 running, and can this node reach " +
                                            server + "?"};
        }
        back_off(delay, deadline);
    }
}

}  // namespace

Result<LaunchRank> launch_rank_from_environment(const EnvironmentLookup& lookup) {
    for (const Launcher& launcher : kLaunchers) {
        if (!launched_by(lookup, launcher)) {
            continue;
        }
        auto rank = read_variable(lookup, launcher, launcher.rank);
        if (!rank) {
            return rank.error();
        }
        auto size = read_variable(lookup, launcher, launcher.size);
        if (!size) {
            return size.error();
        }
        auto local_rank = read_variable(lookup, launcher, launcher.local_rank);
        if (!local_rank) {
            return local_rank.error();
        }
        const auto named = [&](const char* variable, int value) {
            return std::string(variable) + "=" + std::to_string(value);
        };
        if (*size < 1) {
            return Error{
                ErrorCode::invalid_input,
                named(launcher.size, *size) + " is no world size (set by " + launcher.name + ")"};
        }
        if (*rank >= *size || *local_rank >= *size) {
            const char* variable = *rank >= *size ? launcher.rank : launcher.local_rank;
            return Error{ErrorCode::invalid_input,
                         named(variable, *rank >= *size ? *rank : *local_rank) + " is not below " +
                             named(launcher.size, *size) + " (set by " + launcher.name + ")"};
        }
        return LaunchRank{*rank, *size, *local_rank, launcher.name};
    }
    return LaunchRank{0, 1, 0, "no launcher"};
}

Result<std::vector<std::byte>> rendezvous_exchange(std::string_view spec_text, int rank,
                                                   int world_size,
                                                   std::span<const std::byte> blob_on_rank0,
                                                   std::chrono::milliseconds timeout) {
    auto spec = parse_spec(spec_text);
    if (!spec) {
        return spec.error();
    }
    if (world_size < 1 || rank < 0 || rank >= world_size) {
        return Error{ErrorCode::invalid_input, "rendezvous '" + spec->text + "': rank " +
                                                   std::to_string(rank) + " is not in a world of " +
                                                   std::to_string(world_size)};
    }
    if (rank == 0 && blob_on_rank0.size() > kMaxBlob) {
        return Error{ErrorCode::invalid_input,
                     "rendezvous '" + spec->text + "': " + std::to_string(blob_on_rank0.size()) +
                         " bytes is more than the " + std::to_string(kMaxBlob) +
                         " a rendezvous carries"};
    }
    std::vector<std::byte> blob(blob_on_rank0.begin(), blob_on_rank0.end());
    if (world_size == 1) {
        return blob;
    }
    Status status;
    if (spec->kind == Spec::Kind::file) {
        if (rank > 0) {
            return read_published_file(*spec, rank, world_size, timeout);
        }
        status = publish_file(*spec, world_size, blob);
    } else {
        if (rank > 0) {
            return fetch_tcp(*spec, rank, world_size, timeout);
        }
        status = serve_tcp(*spec, world_size, blob, timeout);
    }
    if (!status) {
        return status.error();
    }
    return blob;
}

Status rendezvous_cleanup(std::string_view spec_text, int rank) {
    auto spec = parse_spec(spec_text);
    if (!spec) {
        return spec.error();
    }
    if (rank != 0 || spec->kind != Spec::Kind::file) {
        return {};
    }
    if (::unlink(spec->path.c_str()) != 0 && errno != ENOENT) {
        return Error{ErrorCode::io, "rank 0 cannot remove the rendezvous file " + spec->path +
                                        ": " + errno_text(errno)};
    }
    return {};
}

}  // namespace fulcrum::engine
