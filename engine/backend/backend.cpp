#include "engine/backend/backend.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

namespace fulcrum::engine {

void check_failed(const char* condition, const char* message, const char* file, int line) {
    std::fprintf(stderr, "fulcrum engine: %s:%d: check failed: %s (%s)\n", file, line, condition,
                 message);
    std::abort();
}

const char* device_name(Device device) {
    switch (device) {
        case Device::cpu:
            return "cpu";
        case Device::cuda:
            return "cuda";
    }
    return "unknown";
}

std::size_t dtype_size(DType dtype) {
    switch (dtype) {
        case DType::f32:
            return 4;
        case DType::i32:
            return 4;
    }
    return 0;
}

// ---- Tensor -------------------------------------------------------------------------------

Tensor::Tensor(void* data, DType dtype, Device device, std::initializer_list<std::int64_t> shape)
    : data_(data), dtype_(dtype), device_(device), rank_(static_cast<int>(shape.size())) {
    FULCRUM_CHECK(rank_ == 1 || rank_ == 2, "tensors are 1-D or 2-D");
    int axis = 0;
    for (std::int64_t d : shape) {
        FULCRUM_CHECK(d >= 0, "negative dimension");
        dims_[axis++] = d;
    }
    row_stride_ = rank_ == 2 ? dims_[1] : 1;
}

std::int64_t Tensor::dim(int axis) const {
    FULCRUM_CHECK(axis >= 0 && axis < rank_, "axis out of range");
    return dims_[axis];
}

std::int64_t Tensor::rows() const {
    FULCRUM_CHECK(rank_ == 2, "rows() of a tensor that is not 2-D");
    return dims_[0];
}

std::int64_t Tensor::cols() const {
    FULCRUM_CHECK(rank_ == 2, "cols() of a tensor that is not 2-D");
    return dims_[1];
}

std::int64_t Tensor::numel() const {
    return rank_ == 1 ? dims_[0] : dims_[0] * dims_[1];
}

float* Tensor::f32() const {
    FULCRUM_CHECK(dtype_ == DType::f32, "tensor is not f32");
    return static_cast<float*>(data_);
}

std::int32_t* Tensor::i32() const {
    FULCRUM_CHECK(dtype_ == DType::i32, "tensor is not i32");
    return static_cast<std::int32_t*>(data_);
}

Tensor Tensor::slice(std::int64_t begin, std::int64_t count) const {
    FULCRUM_CHECK(rank_ >= 1 && begin >= 0 && count >= 0 && begin + count <= dims_[0],
                  "slice out of range");
    Tensor t = *this;
    const std::int64_t step = rank_ == 2 ? row_stride_ : 1;
    t.data_ = static_cast<char*>(data_) + begin * step * std::int64_t(dtype_size(dtype_));
    t.dims_[0] = count;
    return t;
}

Tensor Tensor::columns(std::int64_t begin, std::int64_t count) const {
    FULCRUM_CHECK(rank_ == 2 && begin >= 0 && count >= 0 && begin + count <= dims_[1],
                  "column block out of range");
    Tensor t = *this;
    t.data_ = static_cast<char*>(data_) + begin * std::int64_t(dtype_size(dtype_));
    t.dims_[1] = count;
    return t;
}

Tensor Tensor::reshaped(std::initializer_list<std::int64_t> shape) const {
    FULCRUM_CHECK(contiguous(), "reshape of a strided view");
    Tensor t(data_, dtype_, device_, shape);
    FULCRUM_CHECK(t.numel() == numel(), "reshape changes the element count");
    return t;
}

bool Tensor::same_shape(const Tensor& other) const {
    if (rank_ != other.rank_)
        return false;
    for (int axis = 0; axis < rank_; ++axis) {
        if (dims_[axis] != other.dims_[axis])
            return false;
    }
    return true;
}

// ---- DeviceBuffer -------------------------------------------------------------------------

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept {
    *this = std::move(other);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
        if (data_ != nullptr)
            backend_->release(data_);
        backend_ = std::exchange(other.backend_, nullptr);
        data_ = std::exchange(other.data_, nullptr);
        bytes_ = std::exchange(other.bytes_, 0);
        device_ = other.device_;
    }
    return *this;
}

DeviceBuffer::~DeviceBuffer() {
    if (data_ != nullptr)
        backend_->release(data_);
}

Tensor DeviceBuffer::view(DType dtype, std::int64_t offset,
                          std::initializer_list<std::int64_t> shape) const {
    Tensor t(static_cast<char*>(data_) + offset * std::int64_t(dtype_size(dtype)), dtype, device_,
             shape);
    FULCRUM_CHECK(offset >= 0 && std::size_t(offset + t.numel()) * dtype_size(dtype) <= bytes_,
                  "view outside its buffer");
    return t;
}

DeviceBuffer Backend::allocate(std::size_t bytes) {
    DeviceBuffer buffer;
    buffer.backend_ = this;
    buffer.bytes_ = bytes;
    buffer.device_ = device();
    buffer.data_ = bytes == 0 ? nullptr : allocate_raw(bytes);
    if (buffer.data_ != nullptr) {
        const std::lock_guard lock(allocations_mutex_);
        allocations_.emplace(static_cast<const std::byte*>(buffer.data_), bytes);
        memory_.device_bytes += std::int64_t(bytes);
        memory_.peak_device_bytes = std::max(memory_.peak_device_bytes, memory_.device_bytes);
    }
    return buffer;
}

void check_attention_spans(std::span<const AttentionSpan> spans, std::int64_t q_rows,
                           std::int64_t kv_rows) {
    for (const AttentionSpan& s : spans) {
        FULCRUM_CHECK(s.q_begin >= 0 && s.kv_begin >= 0 && s.prefix >= 0 && s.length >= 0 &&
                          s.key_begin >= 0 && s.key_end > s.key_begin,
                      "negative attention span field or empty key window");
        FULCRUM_CHECK(std::int64_t(s.q_begin) + s.length <= q_rows,
                      "attention span past the last query row");
        const std::int64_t keys = s.length == 0 ? 0 : s.visible_end(s.length - 1) - s.key_begin;
        FULCRUM_CHECK(std::int64_t(s.kv_begin) + std::max<std::int64_t>(keys, 0) <= kv_rows,
                      "attention span past the last key/value row");
    }
}

PinnedBuffer Backend::allocate_pinned(std::size_t floats) {
    void* data = floats == 0 ? nullptr : allocate_pinned_raw(floats * sizeof(float));
    if (data != nullptr) {
        const std::lock_guard lock(allocations_mutex_);
        pinned_.emplace(data, floats * sizeof(float));
        memory_.pinned_bytes += std::int64_t(floats * sizeof(float));
        memory_.peak_pinned_bytes = std::max(memory_.peak_pinned_bytes, memory_.pinned_bytes);
    }
    return PinnedBuffer(static_cast<float*>(data), PinnedDeleter{this});
}

void PinnedDeleter::operator()(float* data) const {
    if (data != nullptr) {
        {
            const std::lock_guard lock(backend->allocations_mutex_);
            const auto found = backend->pinned_.find(data);
            backend->memory_.pinned_bytes -= std::int64_t(found->second);
            backend->pinned_.erase(found);
        }
        backend->release_pinned_raw(data);
    }
}

bool Backend::is_pinned(const void* data) const {
    const std::lock_guard lock(allocations_mutex_);
    auto after = pinned_.upper_bound(data);
    if (after == pinned_.begin()) {
        return false;
    }
    const auto& [base, size] = *std::prev(after);
    return static_cast<const std::byte*>(data) < static_cast<const std::byte*>(base) + size;
}

MemoryUse Backend::memory_use() const {
    const std::lock_guard lock(allocations_mutex_);
    return memory_;
}

void* Backend::allocate_pinned_raw(std::size_t bytes) {
    constexpr std::size_t kAlignment = 64;
    void* data = std::aligned_alloc(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
    FULCRUM_CHECK(data != nullptr, "out of host memory");
    return data;
}

void Backend::release_pinned_raw(void* data) {
    std::free(data);
}

void Backend::release(void* data) {
    {
        const std::lock_guard lock(allocations_mutex_);
        const auto found = allocations_.find(static_cast<const std::byte*>(data));
        memory_.device_bytes -= std::int64_t(found->second);
        allocations_.erase(found);
    }
    release_raw(data);
}

bool Backend::holds(const void* data, std::size_t bytes) const {
    const auto* begin = static_cast<const std::byte*>(data);
    const std::lock_guard lock(allocations_mutex_);
    auto after = allocations_.upper_bound(begin);
    if (after == allocations_.begin()) {
        return false;
    }
    const auto& [base, size] = *std::prev(after);
    return begin + bytes <= base + size;
}

}  // namespace fulcrum::engine
