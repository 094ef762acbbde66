// An MPI program that annotates itself in the `fulcrum` NVTX domain exactly as
// docs/annotations.md asks, the way fulcrum-train does: rank and run marks, clock-sync marks
// after barriers, a workload manifest per step, and step / forward / backward / attention /
// mlp / point-to-point / all-reduce / optimizer ranges with their keys. The grid is
// dp x pp with pp = 2 (cp = tp = 1), rank = dp_index * 2 + pp_index.
//
//   mpirun -np 4 fulcrum_ranks [--steps S] [--microbatches M] [--kill-rank R --kill-step K]
//
// --kill-rank: that rank SIGKILLs itself in step K, after its writer committed.
#include <mpi.h>
#include <nvtx3/nvToolsExt.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

nvtxDomainHandle_t g_domain = nullptr;

enum Category : uint32_t {
    compute = 1,
    attention = 2,
    communication = 3,
    optimizer = 5,
    schedule = 8
};

nvtxEventAttributes_t attributes(uint32_t category) {
    nvtxEventAttributes_t a = {};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.category = category;
    return a;
}

void push(uint32_t category, const std::string& message) {
    auto a = attributes(category);
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = message.c_str();
    nvtxDomainRangePushEx(g_domain, &a);
}

void pop() {
    nvtxDomainRangePop(g_domain);
}

void mark(const std::string& message) {
    auto a = attributes(0);
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = message.c_str();
    nvtxDomainMarkEx(g_domain, &a);
}

std::string keys(int step, int mb, int stage, const char* phase) {
    std::string text = " step=" + std::to_string(step) + " mb=" + std::to_string(mb) +
                       " stage=" + std::to_string(stage);
    if (phase != nullptr) {
        text += std::string(" phase=") + phase;
    }
    return text;
}

// Documents of micro-batch `mb` on this rank: [doc_id, doc_length, token_begin, token_end].
std::string workload_json(int step, int microbatches, int rank) {
    std::string json =
        "{\"step\":" + std::to_string(step) + ",\"balancer\":\"wlb\",\"microbatches\":[";
    for (int mb = 0; mb < microbatches; ++mb) {
        json += mb > 0 ? ",[" : "[";
        for (int doc = 0; doc < 2; ++doc) {
            const int id = step * 100 + mb * 10 + doc;
            const int length = 100 * (doc + 1) + rank;
            json += (doc > 0 ? "," : "") + std::string("[") + std::to_string(id) + "," +
                    std::to_string(length) + ",0," + std::to_string(length) + "]";
        }
        json += "]";
    }
    return json + "]}";
}

}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    int steps = 3, microbatches = 4, kill_rank = -1, kill_step = -1;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string arg = argv[i];
        const int value = std::atoi(argv[i + 1]);
        if (arg == "--steps")
            steps = value;
        if (arg == "--microbatches")
            microbatches = value;
        if (arg == "--kill-rank")
            kill_rank = value;
        if (arg == "--kill-step")
            kill_step = value;
    }
    const int pp = 2;
    const int dp_index = rank / pp;
    const int stage = rank % pp;

    g_domain = nvtxDomainCreateA("fulcrum");
    mark("fulcrum.rank {\"rank\":" + std::to_string(rank) + ",\"world\":" + std::to_string(world) +
         ",\"dp\":" + std::to_string(dp_index) + ",\"pp\":" + std::to_string(stage) +
         ",\"cp\":0,\"tp\":0,\"device\":-1}");
    mark("fulcrum.run {\"model\":\"tiny\",\"dp\":" + std::to_string(world / pp) +
         ",\"pp\":2,\"cp\":1,\"tp\":1,\"schedule\":\"1f1b\",\"balancer\":\"wlb\"}");
    for (int k = 0; k < 2; ++k) {
        MPI_Barrier(MPI_COMM_WORLD);
        mark("fulcrum.clock_sync");
    }

    std::vector<float> gradients(2048, 1.0f);
    for (int step = 0; step < steps; ++step) {
        mark("fulcrum.workload " + workload_json(step, microbatches, rank));
        push(schedule, "step step=" + std::to_string(step));
        for (const char* phase : {"fwd", "bwd"}) {
            const bool forward = phase[0] == 'f';
            for (int mb = 0; mb < microbatches; ++mb) {
                push(compute,
                     std::string(forward ? "forward" : "backward") + keys(step, mb, stage, phase));
                push(attention, "attention" + keys(step, mb, stage, phase) + " layer=0");
                pop();
                push(compute, "mlp" + keys(step, mb, stage, phase));
                pop();
                pop();
                push(communication, std::string(forward ? "send activations" : "send gradients") +
                                        keys(step, mb, stage, nullptr) + " bytes=4096");
                pop();
            }
        }
        // A registered message, with the bytes as payload (docs/annotations.md).
        const std::string all_reduce = "dp all-reduce gradients step=" + std::to_string(step);
        auto a = attributes(communication);
        a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
        a.message.registered = nvtxDomainRegisterStringA(g_domain, all_reduce.c_str());
        a.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
        a.payload.ullValue = gradients.size() * sizeof(float);
        nvtxDomainRangePushEx(g_domain, &a);
        MPI_Allreduce(MPI_IN_PLACE, gradients.data(), static_cast<int>(gradients.size()), MPI_FLOAT,
                      MPI_SUM, MPI_COMM_WORLD);
        pop();
        push(optimizer, "optimizer step=" + std::to_string(step));
        pop();
        pop();  // step
        if (rank == kill_rank && step == kill_step) {
            // Past two of the writer's 250 ms commits: what it recorded is on disk.
            std::this_thread::sleep_for(std::chrono::milliseconds(700));
            raise(SIGKILL);
        }
    }
    MPI_Finalize();
    return 0;
}
