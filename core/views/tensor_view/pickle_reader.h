// PickleReader: a Python pickle read into an inert tree of values. It builds no Python object and
// runs no code: a GLOBAL stays a name, REDUCE/NEWOBJ/BUILD become records of what they would
// call with which arguments, persistent ids stay their values. The input is untrusted: every
// length is checked against it, values, stack and memo are bounded, cycles made through the memo
// are allowed (values refer to each other by index), and anything not understood is an error.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"

namespace ckptfs::pickle {

enum class Kind : uint8_t {
  kNone, kBool, kInt, kBigInt, kFloat, kString, kBytes,
  kTuple, kList, kDict, kSet,
  kGlobal,        // text: module, name: the name.
  kObject,        // callable(args), then state (BUILD) and items (SETITEMS/APPENDS on it).
  kPersistentId,  // args: the id's value.
};

using Ref = uint32_t;
inline constexpr Ref kNoRef = UINT32_MAX;

struct Value {
  Kind kind = Kind::kNone;
  int64_t number = 0;     // kBool, kInt.
  double real = 0;        // kFloat.
  // kString (UTF-8), kBytes, kBigInt (little-endian bytes, or decimal text): views of the input
  // or of text the reader decoded.
  std::string_view text;
  std::string_view name;  // kGlobal.
  Ref callable = kNoRef, args = kNoRef, state = kNoRef;  // kObject; args: kPersistentId.
  // kTuple, kList, kSet: the items; kDict and kObject: key and value after each other (an
  // object's are what SETITEMS gave it); kObject also the APPENDS after them, marked by
  // `appended_from`.
  std::vector<Ref> items;
  size_t appended_from = 0;
};

struct Limits {
  size_t max_values = size_t{1} << 22;  // And twice as many pushes (references held).
  size_t max_depth = 4096;  // Of the stack and of MARKs.
};

// A read pickle: the values, and the one STOP returned. Views into `input`, which must outlive it.
// Protocol 0's UNICODE is decoded; its quoted STRING only without escapes.
class Pickle {
 public:
  static Result<Pickle> Read(std::string_view input, const Limits& limits = Limits());

  const Value& at(Ref r) const { return values_[r]; }
  Ref root() const { return root_; }
  size_t size() const { return values_.size(); }

  // Conveniences for walking it; each is false/null/kNoRef when the shape differs.
  bool IsGlobal(Ref r, std::string_view module, std::string_view name) const;
  // The string value of `r` (kString).
  bool String(Ref r, std::string* out) const;
  bool Int(Ref r, int64_t* out) const;
  // kTuple or kList items (a torch.Size is an object whose argument is one such tuple).
  const std::vector<Ref>* Sequence(Ref r) const;
  // A tuple or list of non-negative ints (a shape, offsets).
  bool Sizes(Ref r, std::vector<uint64_t>* out) const;
  // The value of string key `key` in dict `r`.
  Ref Get(Ref dict, std::string_view key) const;
  // The attributes an object was given: its BUILD state dict (the first of a (dict, slots) pair
  // and the slots' too are searched by Attr).
  Ref Attr(Ref object, std::string_view key) const;

 private:
  std::vector<Value> values_;
  std::deque<std::string> decoded_;  // Texts the input holds escaped.
  Ref root_ = kNoRef;
};

}  // namespace ckptfs::pickle
