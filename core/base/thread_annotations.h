// Clang's thread-safety annotations and the annotated mutexes of ckptfs. Built with Clang and
// -Wthread-safety (scripts/test.sh does), the compiler checks that every guarded member is used
// with its lock held; with other compilers the annotations are empty.
//
// Three kinds of lock:
// - Mutex, for state owned by one object (an inode's content, the arena's free list);
// - the namespace lock `ns_lock`: one capability for the Namespace's mutex (a NamespaceMutex),
//   which guards the inode table and the namespace fields of every inode. Inodes do not know
//   their Namespace, so their fields name this capability rather than a member; a process holds
//   one NamespaceMutex at a time.
// - the journal lock `journal_lock`: likewise one capability for a Journal's JournalMutex, which
//   guards the journal and the state of its entries; a thread holds one JournalMutex at a time.
#pragma once

#include <mutex>

#if defined(__clang__)
#define CKPTFS_TSA(x) __attribute__((x))
#else
#define CKPTFS_TSA(x)
#endif

#define CAPABILITY(x) CKPTFS_TSA(capability(x))
#define SCOPED_CAPABILITY CKPTFS_TSA(scoped_lockable)
#define GUARDED_BY(x) CKPTFS_TSA(guarded_by(x))
#define PT_GUARDED_BY(x) CKPTFS_TSA(pt_guarded_by(x))
#define REQUIRES(...) CKPTFS_TSA(requires_capability(__VA_ARGS__))
#define ACQUIRE(...) CKPTFS_TSA(acquire_capability(__VA_ARGS__))
#define RELEASE(...) CKPTFS_TSA(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) CKPTFS_TSA(try_acquire_capability(__VA_ARGS__))
#define EXCLUDES(...) CKPTFS_TSA(locks_excluded(__VA_ARGS__))
#define NO_THREAD_SAFETY_ANALYSIS CKPTFS_TSA(no_thread_safety_analysis)

namespace ckptfs {

class CAPABILITY("mutex") Mutex {
 public:
  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }
  bool try_lock() TRY_ACQUIRE(true) { return mu_.try_lock(); }

 private:
  std::mutex mu_;
};

// The capability of the namespace lock (see the top of this file).
class CAPABILITY("namespace lock") NamespaceCapability {};
inline NamespaceCapability ns_lock;

// The Namespace's mutex: locking it acquires `ns_lock`.
class NamespaceMutex {
 public:
  void lock() ACQUIRE(ns_lock) NO_THREAD_SAFETY_ANALYSIS { mu_.lock(); }
  void unlock() RELEASE(ns_lock) NO_THREAD_SAFETY_ANALYSIS { mu_.unlock(); }

 private:
  std::mutex mu_;
};

// The capability of a journal's lock (see the top of this file).
class CAPABILITY("journal lock") JournalCapability {};
inline JournalCapability journal_lock;

// A Journal's lock: locking it acquires `journal_lock`.
class JournalMutex {
 public:
  void lock() ACQUIRE(journal_lock) NO_THREAD_SAFETY_ANALYSIS { mu_.lock(); }
  void unlock() RELEASE(journal_lock) NO_THREAD_SAFETY_ANALYSIS { mu_.unlock(); }

 private:
  std::mutex mu_;
};

// Holds a Mutex for its scope. Unlock and Lock release and take it again inside the scope; a
// condition_variable_any waits on it.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() RELEASE() {
    if (held_) mu_.unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;
  void Unlock() RELEASE() {
    mu_.unlock();
    held_ = false;
  }
  void Lock() ACQUIRE() {
    mu_.lock();
    held_ = true;
  }
  void lock() ACQUIRE() { Lock(); }
  void unlock() RELEASE() { Unlock(); }

 private:
  Mutex& mu_;
  bool held_ = true;
};

// Holds the namespace lock for its scope; like MutexLock otherwise.
class SCOPED_CAPABILITY NamespaceLock {
 public:
  explicit NamespaceLock(NamespaceMutex& mu) ACQUIRE(ns_lock) : mu_(mu) { mu_.lock(); }
  ~NamespaceLock() RELEASE() {
    if (held_) mu_.unlock();
  }
  NamespaceLock(const NamespaceLock&) = delete;
  NamespaceLock& operator=(const NamespaceLock&) = delete;
  void Unlock() RELEASE() {
    mu_.unlock();
    held_ = false;
  }
  void Lock() ACQUIRE() {
    mu_.lock();
    held_ = true;
  }
  void lock() ACQUIRE() { Lock(); }
  void unlock() RELEASE() { Unlock(); }

 private:
  NamespaceMutex& mu_;
  bool held_ = true;
};

// Holds a journal's lock for its scope.
class SCOPED_CAPABILITY JournalLock {
 public:
  explicit JournalLock(JournalMutex& mu) ACQUIRE(journal_lock) : mu_(mu) { mu_.lock(); }
  ~JournalLock() RELEASE() { mu_.unlock(); }
  JournalLock(const JournalLock&) = delete;
  JournalLock& operator=(const JournalLock&) = delete;

 private:
  JournalMutex& mu_;
};

}  // namespace ckptfs
