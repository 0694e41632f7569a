#include "core/filesystem/handle_table.h"

#include <spdlog/spdlog.h>

#include <cstdlib>

namespace ckptfs {

Status UnknownHandle(uint64_t number) {
  return Status::Error(EBADF, "handle " + std::to_string(number) +
                                  " was opened by a worker that stopped without handing it over");
}

HandleTable::HandleTable(uint32_t worker, Clock& clock)
    : clock_(clock),
      tag_((uint64_t{worker % 0xFFFF} + 1) << kTagShift),
      last_open_or_release_(clock.Now()) {}

uint64_t HandleTable::AddLocked(std::unique_ptr<Handle> handle) {
  Handle* h = handle.get();
  const auto address = reinterpret_cast<uint64_t>(h);
  if (address >> kTagShift != 0) {
    spdlog::critical("a handle at {:#x} leaves no room for the worker's tag", address);
    std::abort();
  }
  if (h->file()) {
    ++open_files_;
    last_open_or_release_ = clock_.Now();
  }
  h->number = address | tag_;
  handles_.emplace(h, std::move(handle));
  return h->number;
}

void HandleTable::AddEarlierLocked(std::unique_ptr<Handle> handle, uint64_t number) {
  Handle* h = handle.get();
  if (h->file()) {
    ++open_files_;
    last_open_or_release_ = clock_.Now();
  }
  h->number = number;
  earlier_.emplace(number, h);
  handles_.emplace(h, std::move(handle));
}

Handle* HandleTable::Find(uint64_t number) const {
  if ((number & ~kAddressMask) == tag_) return reinterpret_cast<Handle*>(number & kAddressMask);
  auto it = earlier_.find(number);
  return it == earlier_.end() ? nullptr : it->second;
}

bool HandleTable::IsEarlier(uint64_t number) const { return earlier_.count(number) > 0; }

void HandleTable::RemoveLocked(Handle* handle) {
  if (handle->file()) {
    --open_files_;
    last_open_or_release_ = clock_.Now();
  }
  handles_.erase(handle);
}

void HandleTable::ClearLocked() { handles_.clear(); }

bool HandleTable::NoFileOpenForLocked(Clock::duration quiet) const {
  return open_files_ == 0 && clock_.Now() - last_open_or_release_ >= quiet;
}

void HandleTable::NoteOpenedByLocked(uint64_t request, uint64_t number) {
  opened_by_request_[request] = number;
}

Handle* HandleTable::TakeOpenedByLocked(uint64_t request) {
  if (request == 0) return nullptr;
  auto it = opened_by_request_.find(request);
  if (it == opened_by_request_.end()) return nullptr;
  auto earlier = earlier_.find(it->second);
  opened_by_request_.erase(it);
  if (earlier == earlier_.end() || handles_.count(earlier->second) == 0) return nullptr;
  return earlier->second;
}

void HandleTable::ForgetOpenedByLocked(uint64_t request) {
  if (!opened_by_request_.empty()) opened_by_request_.erase(request);
}

uint64_t HandleTable::AddDir(std::vector<DirEntry> entries) {
  MutexLock lock(dir_mu_);
  const uint64_t number = tag_ | next_dir_++;
  dirs_.emplace(number, std::move(entries));
  return number;
}

void HandleTable::AddEarlierDir(uint64_t number, std::vector<DirEntry> entries) {
  MutexLock lock(dir_mu_);
  dirs_.emplace(number, std::move(entries));
}

Result<std::vector<DirEntry>> HandleTable::ReadDir(uint64_t number, uint64_t offset) const {
  MutexLock lock(dir_mu_);
  auto it = dirs_.find(number);
  if (it == dirs_.end()) return UnknownHandle(number);
  const std::vector<DirEntry>& entries = it->second;
  if (offset >= entries.size()) return std::vector<DirEntry>{};
  return std::vector<DirEntry>(entries.begin() + static_cast<ptrdiff_t>(offset), entries.end());
}

void HandleTable::ReleaseDir(uint64_t number) {
  MutexLock lock(dir_mu_);
  dirs_.erase(number);
}

std::vector<std::pair<uint64_t, std::vector<DirEntry>>> HandleTable::Dirs() const {
  MutexLock lock(dir_mu_);
  return {dirs_.begin(), dirs_.end()};
}

}  // namespace ckptfs
