#include "engine/comm/staged_communicator.h"

#include <algorithm>
#include <utility>

namespace fulcrum::engine {
namespace {

Tensor device_view(std::span<const float> values, Device device) {
    return Tensor(const_cast<float*>(values.data()), DType::f32, device,
                  {std::int64_t(values.size())});
}

}  // namespace

StagedCommunicator::StagedCommunicator(std::unique_ptr<Communicator> host, Backend& backend)
    : StagedCommunicator(std::move(host), backend, std::make_shared<std::int64_t>(0)) {}

StagedCommunicator::StagedCommunicator(std::unique_ptr<Communicator> host, Backend& backend,
                                       std::shared_ptr<std::int64_t> bytes_staged)
    : host_(std::move(host)), backend_(backend), bytes_staged_(std::move(bytes_staged)) {}

bool StagedCommunicator::on_device(std::span<const float> values) const {
    return !values.empty() && backend_.holds(values.data(), values.size_bytes());
}

std::span<float> StagedCommunicator::to_host(std::span<const float> values,
                                             std::vector<float>& staging, bool fill) {
    if (!on_device(values)) {
        return {const_cast<float*>(values.data()), values.size()};
    }
    staging.resize(values.size());
    if (fill) {
        backend_.download(staging.data(), device_view(values, backend_.device()), kComputeStream);
        *bytes_staged_ += std::int64_t(values.size_bytes());
    }
    return staging;
}

void StagedCommunicator::to_device(std::span<float> values, std::span<const float> host) {
    if (host.data() == values.data()) {
        return;
    }
    backend_.upload(device_view(values, backend_.device()), host.data(), kComputeStream);
    *bytes_staged_ += std::int64_t(values.size_bytes());
}

void StagedCommunicator::all_reduce_sum(std::span<float> values) {
    const std::span<float> host = to_host(values, staging_in_, true);
    host_->all_reduce_sum(host);
    to_device(values, host);
}

void StagedCommunicator::all_reduce_sum(std::span<double> values) {
    host_->all_reduce_sum(values);
}

void StagedCommunicator::start_all_reduce_sum(std::span<float> values) {
    if (!on_device(values)) {
        host_->start_all_reduce_sum(values);
        return;
    }
    Started& started = started_.emplace_back(Started{values, {}});
    to_host(values, started.host, true);
    host_->start_all_reduce_sum(started.host);
}

void StagedCommunicator::wait_all_reduces() {
    host_->wait_all_reduces();
    for (const Started& started : started_) {
        to_device(started.device, started.host);
    }
    started_.clear();
}

void StagedCommunicator::all_gather(std::span<const float> local, std::span<float> out,
                                    const std::vector<int>& counts) {
    const std::span<float> host_local = to_host(local, staging_in_, true);
    const std::span<float> host_out = to_host(out, staging_out_, false);
    host_->all_gather(host_local, host_out, counts);
    to_device(out, host_out);
}

void StagedCommunicator::reduce_scatter_sum(std::span<const float> in, std::span<float> out,
                                            const std::vector<int>& counts) {
    const std::span<float> host_in = to_host(in, staging_in_, true);
    const std::span<float> host_out = to_host(out, staging_out_, false);
    host_->reduce_scatter_sum(host_in, host_out, counts);
    to_device(out, host_out);
}

void StagedCommunicator::all_to_all(std::span<const float> in, const std::vector<int>& send_counts,
                                    std::span<float> out, const std::vector<int>& recv_counts) {
    const std::span<float> host_in = to_host(in, staging_in_, true);
    const std::span<float> host_out = to_host(out, staging_out_, false);
    host_->all_to_all(host_in, send_counts, host_out, recv_counts);
    to_device(out, host_out);
}

std::int64_t StagedCommunicator::start_all_to_all(std::span<const float> in,
                                                  const std::vector<int>& send_counts,
                                                  std::span<float> out,
                                                  const std::vector<int>& recv_counts) {
    StartedExchange& x =
        exchanges_.emplace_back(StartedExchange{Communicator::kNoTicket, out, {}, {}});
    const std::span<float> host_in = to_host(in, x.host_in, true);
    const std::span<float> host_out = to_host(out, x.host_out, false);
    x.ticket = host_->start_all_to_all(host_in, send_counts, host_out, recv_counts);
    return x.ticket;
}

void StagedCommunicator::wait_all_to_all(std::int64_t ticket) {
    host_->wait_all_to_all(ticket);
    const auto x = std::find_if(exchanges_.begin(), exchanges_.end(),
                                [&](const StartedExchange& e) { return e.ticket == ticket; });
    if (x != exchanges_.end()) {
        to_device(x->device_out, x->host_out);
        exchanges_.erase(x);
    }
}

void StagedCommunicator::send(std::span<const float> values, int peer) {
    host_->send(to_host(values, staging_in_, true), peer);
}

void StagedCommunicator::post_send(std::span<const float> values, int peer) {
    // The host communicator copies what it posts, so the staging buffer is free at once.
    host_->post_send(to_host(values, staging_in_, true), peer);
}

void StagedCommunicator::wait_sends() {
    host_->wait_sends();
}

void StagedCommunicator::recv(std::span<float> values, int peer) {
    const std::span<float> host = to_host(values, staging_out_, false);
    host_->recv(host, peer);
    to_device(values, host);
}

void StagedCommunicator::send_recv(std::span<const float> send_values, int send_peer,
                                   std::span<float> recv_values, int recv_peer) {
    const std::span<float> host_send = to_host(send_values, staging_in_, true);
    const std::span<float> host_recv = to_host(recv_values, staging_out_, false);
    host_->send_recv(host_send, send_peer, host_recv, recv_peer);
    to_device(recv_values, host_recv);
}

void StagedCommunicator::broadcast(std::span<float> values, int root) {
    const std::span<float> host = to_host(values, staging_in_, rank() == root);
    host_->broadcast(host, root);
    to_device(values, host);
}

void StagedCommunicator::broadcast_bytes(std::span<std::byte> bytes, int root) {
    host_->broadcast_bytes(bytes, root);
}

void StagedCommunicator::barrier() {
    host_->barrier();
}

std::unique_ptr<Communicator> StagedCommunicator::split(int color, int key, std::string name) {
    return std::unique_ptr<Communicator>(
        new StagedCommunicator(host_->split(color, key, std::move(name)), backend_, bytes_staged_));
}

}  // namespace fulcrum::engine
