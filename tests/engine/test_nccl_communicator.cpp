// NcclCommunicator on one GPU: a communicator of one rank (the only kind NCCL before 2.30 allows
// on a single GPU, docs/sources.md, "NCCL"), every call checked against the values it must produce,
// on device buffers and on host buffers (pageable and pinned, which the communicator stages). The
// results are read back through the communicator's own stream, so each check also says that
// the operation is ordered before later work on that stream. Without a GPU the tests that
// need one skip with the reason CUDA gave; what needs none runs everywhere: rank checks,
// rendezvous errors, unique ids, and the bootstraps up to the Error that names CUDA's reason.
#include <QTest>

#include <QTemporaryDir>

#include <cuda_runtime.h>
#include <nccl.h>

#include <filesystem>
#include <memory>
#include <numeric>
#include <string>
#include <thread>

#include "engine/backend/cuda/cuda_backend.h"  // cuda_device_available
#include "engine/comm/nccl_communicator.h"

using namespace fulcrum;
using namespace fulcrum::engine;

namespace {

enum class Memory { device, host, pinned };

// A float buffer in one kind of memory, filled and read through `stream`.
class Buffer {
public:
    Buffer(Memory memory, std::vector<float> values, cudaStream_t stream)
        : memory_(memory), size_(values.size()), stream_(stream) {
        switch (memory_) {
            case Memory::host:
                host_ = std::move(values);
                data_ = host_.data();
                return;
            case Memory::device:
                cudaMalloc(&data_, bytes());
                break;
            case Memory::pinned:
                cudaMallocHost(&data_, bytes());
                break;
        }
        write(values);
    }
    ~Buffer() {
        if (memory_ == Memory::device) {
            cudaFree(data_);
        } else if (memory_ == Memory::pinned) {
            cudaFreeHost(data_);
        }
    }
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;

    std::span<float> span() { return {static_cast<float*>(data_), size_}; }

    void write(const std::vector<float>& values) {
        if (memory_ == Memory::device) {
            cudaMemcpyAsync(data_, values.data(), bytes(), cudaMemcpyHostToDevice, stream_);
            cudaStreamSynchronize(stream_);
        } else {
            std::copy(values.begin(), values.end(), static_cast<float*>(data_));
        }
    }
    // What the buffer holds once the work enqueued on the stream so far is done.
    std::vector<float> read() const {
        std::vector<float> values(size_);
        if (memory_ == Memory::device) {
            cudaMemcpyAsync(values.data(), data_, bytes(), cudaMemcpyDeviceToHost, stream_);
        }
        cudaStreamSynchronize(stream_);
        if (memory_ != Memory::device) {
            std::copy_n(static_cast<const float*>(data_), size_, values.begin());
        }
        return values;
    }

private:
    std::size_t bytes() const { return size_ * sizeof(float); }
    Memory memory_;
    std::size_t size_;
    cudaStream_t stream_;
    std::vector<float> host_;
    void* data_ = nullptr;
};

std::vector<float> ramp(std::size_t n, float start) {
    std::vector<float> values(n);
    for (std::size_t i = 0; i < n; ++i) {
        values[i] = start + 0.25f * float(i);
    }
    return values;
}

// A host communicator of one rank, for bootstrap_over without MPI: broadcasting to oneself
// leaves the bytes as they are.
class LoneHostCommunicator final : public Communicator {
public:
    int rank() const override { return 0; }
    int size() const override { return 1; }
    const std::string& name() const override { return name_; }
    void all_reduce_sum(std::span<float>) override {}
    void all_reduce_sum(std::span<double>) override {}
    void all_gather(std::span<const float> local, std::span<float> out,
                    const std::vector<int>&) override {
        std::copy(local.begin(), local.end(), out.begin());
    }
    void reduce_scatter_sum(std::span<const float> in, std::span<float> out,
                            const std::vector<int>&) override {
        std::copy(in.begin(), in.end(), out.begin());
    }
    void all_to_all(std::span<const float> in, const std::vector<int>&, std::span<float> out,
                    const std::vector<int>&) override {
        std::copy(in.begin(), in.end(), out.begin());
    }
    void send(std::span<const float>, int) override {}
    void post_send(std::span<const float>, int) override {}
    void wait_sends() override {}
    void recv(std::span<float>, int) override {}
    void send_recv(std::span<const float>, int, std::span<float>, int) override {}
    void broadcast(std::span<float>, int) override {}
    void broadcast_bytes(std::span<std::byte>, int) override { ++broadcasts; }
    void barrier() override {}
    std::unique_ptr<Communicator> split(int, int, std::string) override {
        return std::make_unique<LoneHostCommunicator>();
    }
    int broadcasts = 0;

private:
    std::string name_ = "world";
};

}  // namespace

Q_DECLARE_METATYPE(Memory)

class NcclCommunicatorTest : public QObject {
    Q_OBJECT

private slots:
    void initTestCase();
    void cleanupTestCase();
    void createChecksTheRank();
    void rendezvousErrorsComeBeforeNccl();
    void allReduce_data() { memories(); }
    void allReduce();
    void allReduceDoubles();
    void startedAllReduce_data() { memories(); }
    void startedAllReduce();
    void allGather_data() { memories(); }
    void allGather();
    void reduceScatter_data() { memories(); }
    void reduceScatter();
    void allToAll_data() { memories(); }
    void allToAll();
    void startedAllToAlls_data() { memories(); }
    void startedAllToAlls();
    void broadcast_data() { memories(); }
    void broadcast();
    void broadcastBytes();
    void sendRecvToSelf_data() { memories(); }
    void sendRecvToSelf();
    void postedSendIsACopy_data() { memories(); }
    void postedSendIsACopy();
    void barrierWaitsForTheStream();
    void splitGivesAWorkingGroup();
    void uniqueIdsNeedNoGpu();
    void bootstrapOverAHostCommunicator();
    void bootstrapWithARendezvous();
    void twoRanksOnOneGpuAreRefused();

private:
    void memories() {
        QTest::addColumn<Memory>("memory");
        QTest::newRow("device") << Memory::device;
        QTest::newRow("pageable host") << Memory::host;
        QTest::newRow("pinned host") << Memory::pinned;
    }

    bool gpu_ = false;
    std::string no_gpu_reason_;
    cudaStream_t stream_ = nullptr;
    std::unique_ptr<NcclCommunicator> solo_;
};

#define REQUIRE_GPU()                                                                            \
    do {                                                                                         \
        if (!gpu_)                                                                               \
            QSKIP(qPrintable(                                                                    \
                QStringLiteral("needs a GPU: %1").arg(QString::fromStdString(no_gpu_reason_)))); \
    } while (false)

void NcclCommunicatorTest::initTestCase() {
    gpu_ = cuda_device_available(&no_gpu_reason_);
    if (!gpu_) {
        qInfo("no GPU: %s", no_gpu_reason_.c_str());
        return;
    }
    QCOMPARE(cudaSetDevice(0), cudaSuccess);
    // Non-blocking: nothing orders it with the legacy default stream, so a result that is
    // right when read through it was ordered on it.
    QCOMPARE(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
    auto id = NcclCommunicator::new_unique_id();
    QVERIFY2(id.ok(), id.ok() ? "" : id.error().message.c_str());
    auto solo = NcclCommunicator::create(0, 1, *id, 0, stream_, "solo");
    QVERIFY2(solo.ok(), solo.ok() ? "" : solo.error().message.c_str());
    solo_ = std::move(*solo);
    QCOMPARE(solo_->rank(), 0);
    QCOMPARE(solo_->size(), 1);
    QCOMPARE(solo_->name(), std::string("solo"));
}

void NcclCommunicatorTest::cleanupTestCase() {
    solo_.reset();
    if (stream_ != nullptr) {
        cudaStreamDestroy(stream_);
    }
}

void NcclCommunicatorTest::createChecksTheRank() {
    auto made = NcclCommunicator::create(1, 1, NcclUniqueId{}, 0, nullptr, "tp");
    QVERIFY(!made.ok());
    QCOMPARE(made.error().code, ErrorCode::invalid_input);
    QVERIFY2(made.error().message.find("'tp': rank 1 of 1 on GPU 0") != std::string::npos,
             made.error().message.c_str());
}

// A rank other than 0 makes no NCCL call before it has the id, so a bad spec or an absent
// rank 0 is the rendezvous's message, GPU or not.
void NcclCommunicatorTest::rendezvousErrorsComeBeforeNccl() {
    const LaunchRank second{1, 2, 1, "test"};
    auto bad = NcclCommunicator::bootstrap_with_rendezvous("shared/id", second, 0, nullptr,
                                                           std::chrono::milliseconds(200));
    QVERIFY(!bad.ok());
    QCOMPARE(bad.error().code, ErrorCode::invalid_input);
    QVERIFY2(bad.error().message.find("rendezvous 'shared/id'") != std::string::npos,
             bad.error().message.c_str());
    QTemporaryDir dir;
    const std::string path = dir.filePath("id").toStdString();
    auto absent = NcclCommunicator::bootstrap_with_rendezvous("file:" + path, second, 0, nullptr,
                                                              std::chrono::milliseconds(200));
    QVERIFY(!absent.ok());
    QCOMPARE(absent.error().code, ErrorCode::io);
    QVERIFY2(absent.error().message.find("rank 1 waited 0.2 s for the rendezvous file " + path) !=
                 std::string::npos,
             absent.error().message.c_str());
}

void NcclCommunicatorTest::allReduce() {
    REQUIRE_GPU();
    QFETCH(Memory, memory);
    const auto values = ramp(1000, -3.0f);
    Buffer buffer(memory, values, stream_);
    solo_->all_reduce_sum(buffer.span());
    QCOMPARE(buffer.read(), values);  // the sum over one rank
}

// Started on the side stream after the compute stream's work, finished by the wait: the
// buffer, written on the compute stream just before, is reduced as written.
void NcclCommunicatorTest::startedAllReduce() {
    REQUIRE_GPU();
    QFETCH(Memory, memory);
    const auto values = ramp(4096, 0.5f);
    Buffer buffer(memory, values, stream_);
    solo_->start_all_reduce_sum(buffer.span());
    solo_->wait_all_reduces();
    QCOMPARE(buffer.read(), values);
}

void NcclCommunicatorTest::allReduceDoubles() {
    REQUIRE_GPU();
    // Host memory, as the engine passes it (loss and gradient-norm scalars)...
    std::vector<double> host = {1.5, -2.25, 1e300};
    solo_->all_reduce_sum(std::span<double>(host));
    QCOMPARE(host, (std::vector<double>{1.5, -2.25, 1e300}));
    // ...and device memory, used in place.
    double* device = nullptr;
    QCOMPARE(cudaMalloc(&device, 3 * sizeof(double)), cudaSuccess);
    cudaMemcpyAsync(device, host.data(), 3 * sizeof(double), cudaMemcpyHostToDevice, stream_);
    solo_->all_reduce_sum(std::span<double>(device, 3));
    std::vector<double> back(3);
    cudaMemcpyAsync(back.data(), device, 3 * sizeof(double), cudaMemcpyDeviceToHost, stream_);
    cudaStreamSynchronize(stream_);
    cudaFree(device);
    QCOMPARE(back, host);
}

void NcclCommunicatorTest::allGather() {
    REQUIRE_GPU();
    QFETCH(Memory, memory);
    const auto local_values = ramp(333, 7.0f);
    Buffer local(memory, local_values, stream_);
    Buffer out(memory, std::vector<float>(333, -1.0f), stream_);
    solo_->all_gather(local.span(), out.span(), {333});
    QCOMPARE(out.read(), local_values);
    // Mixed: a host `local` into a device `out` and back, as gather_parameters may do.
    Buffer device_out(Memory::device, std::vector<float>(333, -1.0f), stream_);
    solo_->all_gather(local.span(), device_out.span(), {333});
    QCOMPARE(device_out.read(), local_values);
}

void NcclCommunicatorTest::reduceScatter() {
    REQUIRE_GPU();
    QFETCH(Memory, memory);
    const auto in_values = ramp(257, 0.5f);
    Buffer in(memory, in_values, stream_);
    Buffer out(memory, std::vector<float>(257, -1.0f), stream_);
    solo_->reduce_scatter_sum(in.span(), out.span(), {257});
    QCOMPARE(out.read(), in_values);
}

// One member's all-to-all is a copy: its one block to itself.
void NcclCommunicatorTest::allToAll() {
    REQUIRE_GPU();
    QFETCH(Memory, memory);
    const auto in_values = ramp(129, -1.5f);
    Buffer in(memory, in_values, stream_);
    Buffer out(memory, std::vector<float>(129, 0.0f), stream_);
    solo_->all_to_all(in.span(), {129}, out.span(), {129});
    QCOMPARE(out.read(), in_values);
}

// Two all-to-alls in flight at once on the side stream, waited for last to first: each
// `out` holds its `in` (one member), the second's `in` written on the compute stream after
// the first started; and the compute stream's copy after the wait reads the traded values.
void NcclCommunicatorTest::startedAllToAlls() {
    REQUIRE_GPU();
    QFETCH(Memory, memory);
    const auto first_values = ramp(1000, 0.25f), second_values = ramp(333, -7.0f);
    Buffer first_in(memory, first_values, stream_), second_in(memory, second_values, stream_);
    Buffer first_out(memory, std::vector<float>(1000, 0.0f), stream_);
    Buffer second_out(memory, std::vector<float>(333, 0.0f), stream_);
    const std::int64_t first =
        solo_->start_all_to_all(first_in.span(), {1000}, first_out.span(), {1000});
    const std::int64_t second =
        solo_->start_all_to_all(second_in.span(), {333}, second_out.span(), {333});
    // Device memory goes through the side stream with a ticket; host memory falls back to
    // the blocking call.
    QCOMPARE(first != Communicator::kNoTicket, memory == Memory::device);
    solo_->wait_all_to_all(second);
    solo_->wait_all_to_all(first);
    solo_->wait_all_to_all(first);  // waited for already: nothing
    QCOMPARE(first_out.read(), first_values);
    QCOMPARE(second_out.read(), second_values);
}

void NcclCommunicatorTest::broadcast() {
    REQUIRE_GPU();
    QFETCH(Memory, memory);
    const auto values = ramp(64, 2.0f);
    Buffer buffer(memory, values, stream_);
    solo_->broadcast(buffer.span(), 0);
    QCOMPARE(buffer.read(), values);
}

void NcclCommunicatorTest::broadcastBytes() {
    REQUIRE_GPU();
    // Host bytes, as step plans travel (engine/data/step_plan.cpp).
    std::vector<std::byte> bytes(77);
    for (std::size_t i = 0; i < bytes.size(); ++i) {
        bytes[i] = std::byte(i * 13 + 1);
    }
    const auto sent = bytes;
    solo_->broadcast_bytes(bytes, 0);
    QVERIFY(bytes == sent);
}

void NcclCommunicatorTest::sendRecvToSelf() {
    REQUIRE_GPU();
    QFETCH(Memory, memory);
    const auto values = ramp(500, -1.0f);
    Buffer outgoing(memory, values, stream_);
    Buffer incoming(memory, std::vector<float>(500, 0.0f), stream_);
    solo_->send_recv(outgoing.span(), 0, incoming.span(), 0);
    QCOMPARE(incoming.read(), values);
}

// post_send copies its values (communicator.h): the caller overwrites its buffer at once, and
// the receiver still gets what was posted.
void NcclCommunicatorTest::postedSendIsACopy() {
    REQUIRE_GPU();
    QFETCH(Memory, memory);
    const auto values = ramp(4096, 10.0f);
    Buffer outgoing(memory, values, stream_);
    Buffer incoming(memory, std::vector<float>(4096, 0.0f), stream_);
    solo_->post_send(outgoing.span(), 0);
    outgoing.write(std::vector<float>(4096, -7.0f));
    solo_->recv(incoming.span(), 0);  // goes out in one NCCL group with the posted send
    solo_->wait_sends();
    QCOMPARE(incoming.read(), values);
}

void NcclCommunicatorTest::barrierWaitsForTheStream() {
    REQUIRE_GPU();
    // Work queued before the barrier on the communicator's stream is done when it returns.
    const std::size_t bytes = std::size_t(256) << 20;
    void* big = nullptr;
    QCOMPARE(cudaMalloc(&big, bytes), cudaSuccess);
    QCOMPARE(cudaMemsetAsync(big, 0, bytes, stream_), cudaSuccess);
    solo_->barrier();
    QCOMPARE(cudaStreamQuery(stream_), cudaSuccess);
    cudaFree(big);
}

void NcclCommunicatorTest::splitGivesAWorkingGroup() {
    REQUIRE_GPU();
    auto tp = solo_->split(7, 0, "tp");
    QVERIFY(tp != nullptr);
    QCOMPARE(tp->rank(), 0);
    QCOMPARE(tp->size(), 1);
    QCOMPARE(tp->name(), std::string("tp"));
    const auto values = ramp(100, 1.0f);
    Buffer local(Memory::device, values, stream_);
    Buffer out(Memory::device, std::vector<float>(100, 0.0f), stream_);
    tp->all_gather(local.span(), out.span(), {100});
    QCOMPARE(out.read(), values);  // on the parent's stream
}

// ncclGetUniqueId needs no GPU, so without one the bootstrap gets as far as creating the
// communicator, and the user reads CUDA's reason in the Error.
void NcclCommunicatorTest::uniqueIdsNeedNoGpu() {
    auto first = NcclCommunicator::new_unique_id();
    auto second = NcclCommunicator::new_unique_id();
    QVERIFY2(first.ok(), first.ok() ? "" : first.error().message.c_str());
    QVERIFY2(second.ok(), second.ok() ? "" : second.error().message.c_str());
    QVERIFY(*first != *second);
    QVERIFY(*first != NcclUniqueId{});
}

void NcclCommunicatorTest::bootstrapOverAHostCommunicator() {
    LoneHostCommunicator host;
    auto world = NcclCommunicator::bootstrap_over(host, 0, stream_);
    QCOMPARE(host.broadcasts, 1);  // the id went through the host communicator
    if (!gpu_) {
        QVERIFY(!world.ok());
        QCOMPARE(world.error().code, ErrorCode::io);
        QVERIFY2(world.error().message.find("'world': rank 0 of 1 on GPU 0") != std::string::npos,
                 world.error().message.c_str());
        return;
    }
    QVERIFY2(world.ok(), world.ok() ? "" : world.error().message.c_str());
    QCOMPARE((*world)->rank(), 0);
    QCOMPARE((*world)->size(), 1);
    QCOMPARE((*world)->name(), std::string("world"));
    QCOMPARE((*world)->device(), 0);
    const auto values = ramp(10, 3.0f);
    Buffer buffer(Memory::device, values, stream_);
    (*world)->all_reduce_sum(buffer.span());
    QCOMPARE(buffer.read(), values);
}

void NcclCommunicatorTest::bootstrapWithARendezvous() {
    QTemporaryDir dir;
    const std::string path = dir.filePath("id").toStdString();
    auto world = NcclCommunicator::bootstrap_with_rendezvous(
        "file:" + path, LaunchRank{0, 1, 0, "no launcher"}, 0, stream_,
        std::chrono::milliseconds(20000));
    QVERIFY(!std::filesystem::exists(path));  // nobody else to read it: never written
    if (!gpu_) {
        QVERIFY(!world.ok());
        QCOMPARE(world.error().code, ErrorCode::io);
        QVERIFY2(world.error().message.find("'world': rank 0 of 1 on GPU 0") != std::string::npos,
                 world.error().message.c_str());
        return;
    }
    QVERIFY2(world.ok(), world.ok() ? "" : world.error().message.c_str());
    QCOMPARE((*world)->name(), std::string("world"));
    QCOMPARE((*world)->size(), 1);
}

// docs/sources.md, "NCCL": before NCCL 2.30, two ranks of one communicator on one GPU are refused.
// The user must learn that from the Error, with the way out, not from a hang.
void NcclCommunicatorTest::twoRanksOnOneGpuAreRefused() {
    REQUIRE_GPU();
    int version = 0;
    QCOMPARE(ncclGetVersion(&version), ncclSuccess);
    if (version >= 23000) {
        QSKIP("NCCL 2.30 and later let ranks share a GPU");
    }
    auto id = NcclCommunicator::new_unique_id();
    QVERIFY(id.ok());
    Result<std::unique_ptr<NcclCommunicator>> first = Error{ErrorCode::cancelled, "not run"};
    std::thread other([&] { first = NcclCommunicator::create(0, 2, *id, 0, stream_, "world"); });
    auto second = NcclCommunicator::create(1, 2, *id, 0, stream_, "world");
    other.join();
    for (const auto* made : {&first, &second}) {
        QVERIFY2(!made->ok(), "two ranks of one communicator on one GPU were accepted");
        QCOMPARE(made->error().code, ErrorCode::invalid_input);
        QVERIFY2(made->error().message.find("--comm staged") != std::string::npos,
                 made->error().message.c_str());
    }
}

QTEST_GUILESS_MAIN(NcclCommunicatorTest)
#include "test_nccl_communicator.moc"
