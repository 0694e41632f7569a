#include "core/views/tensor_view/pickle_reader.h"

#include <charconv>
#include <cstring>
#include <unordered_map>

namespace ckptfs::pickle {
namespace {

Status Bad(std::string why) { return Status::Error(EBADMSG, "pickle: " + why); }

Value Of(Kind kind) {
  Value v;
  v.kind = kind;
  return v;
}
Value TextValue(Kind kind, std::string_view text) {
  Value v = Of(kind);
  v.text = text;
  return v;
}
Value Global(std::string_view module, std::string_view name) {
  Value v = TextValue(Kind::kGlobal, module);
  v.name = name;
  return v;
}
Value Object(Ref callable, Ref args, Ref state = kNoRef) {
  Value v = Of(Kind::kObject);
  v.callable = callable;
  v.args = args;
  v.state = state;
  return v;
}
Value Persistent(Ref id) {
  Value v = Of(Kind::kPersistentId);
  v.args = id;
  return v;
}

class Reader {
 public:
  Reader(std::string_view in, const Limits& limits, std::vector<Value>& values,
         std::deque<std::string>& decoded)
      : in_(in), limits_(limits), values_(values), decoded_(decoded) {}

  Result<Ref> Run() {
    while (true) {
      if (pos_ >= in_.size()) return Bad("no STOP");
      const uint8_t op = static_cast<uint8_t>(in_[pos_++]);
      if (op == '.') {
        if (stack_.size() != 1 || !marks_.empty()) return Bad("STOP with a stack of " + std::to_string(stack_.size()));
        return stack_.back();
      }
      Status st = Step(op);
      if (!st.ok()) return st;
    }
  }

 private:
  Status Step(uint8_t op) {
    switch (op) {
      case 0x80: return Skip(1);  // PROTO
      case 0x95: return Skip(8);  // FRAME: frames only group the opcodes that follow.
      case '(':
        if (marks_.size() >= limits_.max_depth) return Bad("too many marks");
        marks_.push_back(stack_.size());
        return Status::Ok();
      case '0': return Pop().status();
      case '1': return PopMark().status();
      case '2': {
        if (stack_.empty()) return Bad("DUP of nothing");
        return Push(stack_.back());
      }
      case 'N': return PushNew(Value{});
      case 0x88: case 0x89: {
        Value v = Of(Kind::kBool);
        v.number = op == 0x88;
        return PushNew(std::move(v));
      }
      case 'J': return PushInt(static_cast<int32_t>(Le(4)), 4);
      case 'K': return PushInt(Le(1), 1);
      case 'M': return PushInt(Le(2), 2);
      case 'I': case 'L': return TextInt(op);
      case 0x8a: return LongBytes(1);
      case 0x8b: return LongBytes(4);
      case 'G': {
        if (!Has(8)) return Bad("truncated float");
        uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = bits << 8 | static_cast<uint8_t>(in_[pos_ + i]);
        pos_ += 8;
        Value v = Of(Kind::kFloat);
        std::memcpy(&v.real, &bits, sizeof bits);
        return PushNew(std::move(v));
      }
      case 'F': {
        Result<std::string_view> line = Line();
        if (!line.ok()) return line.status();
        Value v = Of(Kind::kFloat);
        std::from_chars(line->data(), line->data() + line->size(), v.real);
        return PushNew(std::move(v));
      }
      case 'X': return Text(Kind::kString, 4);
      case 'V': return RawUnicode();
      case 'S': {  // A quoted repr: served only when it needs no unescaping.
        Result<std::string_view> line = Line();
        if (!line.ok()) return line.status();
        std::string_view s = *line;
        if (s.size() < 2 || s.front() != s.back() || (s.front() != '\'' && s.front() != '"') ||
            s.find('\\') != std::string_view::npos) {
          return Bad("an escaped protocol 0 STRING");
        }
        return PushNew(TextValue(Kind::kBytes, s.substr(1, s.size() - 2)));
      }
      case 0x8c: return Text(Kind::kString, 1);
      case 0x8d: return Text(Kind::kString, 8);
      case 'T': return Text(Kind::kBytes, 4);
      case 'U': return Text(Kind::kBytes, 1);
      case 'B': return Text(Kind::kBytes, 4);
      case 'C': return Text(Kind::kBytes, 1);
      case 0x8e: case 0x96: return Text(Kind::kBytes, 8);
      case ']': return PushNew(Of(Kind::kList));
      case '}': return PushNew(Of(Kind::kDict));
      case ')': return PushNew(Of(Kind::kTuple));
      case 0x8f: return PushNew(Of(Kind::kSet));
      case 'l': return FromMark(Kind::kList);
      case 't': return FromMark(Kind::kTuple);
      case 'd': return FromMark(Kind::kDict);
      case 0x91: return FromMark(Kind::kSet);
      case 0x85: return TupleOf(1);
      case 0x86: return TupleOf(2);
      case 0x87: return TupleOf(3);
      case 'a': return AddTo(1, /*pairs=*/false);
      case 'e': return AddToMark(/*pairs=*/false);
      case 0x90: return AddToMark(/*pairs=*/false);
      case 's': return AddTo(2, /*pairs=*/true);
      case 'u': return AddToMark(/*pairs=*/true);
      case 'c': {
        Result<std::string_view> module = Line();
        if (!module.ok()) return module.status();
        Result<std::string_view> name = Line();
        if (!name.ok()) return name.status();
        return PushNew(Global(*module, *name));
      }
      case 0x93: {
        Result<Ref> name = Pop();
        if (!name.ok()) return name.status();
        Result<Ref> module = Pop();
        if (!module.ok()) return module.status();
        if (V(*name).kind != Kind::kString || V(*module).kind != Kind::kString) {
          return Bad("STACK_GLOBAL of non-strings");
        }
        return PushNew(Global(V(*module).text, V(*name).text));
      }
      case 'R': case 0x81: {
        Result<Ref> args = Pop();
        if (!args.ok()) return args.status();
        Result<Ref> callable = Pop();
        if (!callable.ok()) return callable.status();
        return PushNew(Object(*callable, *args));
      }
      case 0x92: {  // NEWOBJ_EX: cls, args, kwargs (kwargs kept as the state).
        Result<Ref> kwargs = Pop();
        if (!kwargs.ok()) return kwargs.status();
        Result<Ref> args = Pop();
        if (!args.ok()) return args.status();
        Result<Ref> cls = Pop();
        if (!cls.ok()) return cls.status();
        return PushNew(Object(*cls, *args, *kwargs));
      }
      case 'o': {  // OBJ: MARK cls args... 
        Result<std::vector<Ref>> items = PopMark();
        if (!items.ok()) return items.status();
        if (items->empty()) return Bad("OBJ without a class");
        Value args = Of(Kind::kTuple);
        args.items.assign(items->begin() + 1, items->end());
        Result<Ref> tuple = New(std::move(args));
        if (!tuple.ok()) return tuple.status();
        return PushNew(Object(items->front(), *tuple));
      }
      case 'i': {  // INST module\nname\n: MARK args...
        Result<std::string_view> module = Line();
        if (!module.ok()) return module.status();
        Result<std::string_view> name = Line();
        if (!name.ok()) return name.status();
        Result<std::vector<Ref>> items = PopMark();
        if (!items.ok()) return items.status();
        Result<Ref> cls = New(Global(*module, *name));
        if (!cls.ok()) return cls.status();
        Value args = Of(Kind::kTuple);
        args.items = std::move(*items);
        Result<Ref> tuple = New(std::move(args));
        if (!tuple.ok()) return tuple.status();
        return PushNew(Object(*cls, *tuple));
      }
      case 'b': {
        Result<Ref> state = Pop();
        if (!state.ok()) return state.status();
        if (stack_.empty()) return Bad("BUILD of nothing");
        Value& obj = values_[stack_.back()];
        if (obj.kind != Kind::kObject) return Bad("BUILD of a non-object");
        obj.state = *state;
        return Status::Ok();
      }
      case 'P': {
        Result<std::string_view> line = Line();
        if (!line.ok()) return line.status();
        Result<Ref> id = New(TextValue(Kind::kString, *line));
        if (!id.ok()) return id.status();
        return PushNew(Persistent(*id));
      }
      case 'Q': {
        Result<Ref> id = Pop();
        if (!id.ok()) return id.status();
        return PushNew(Persistent(*id));
      }
      case 'p': {
        Result<std::string_view> line = Line();
        if (!line.ok()) return line.status();
        return Put(ParseUnsigned(*line));
      }
      case 'q': return Put(Le(1), 1);
      case 'r': return Put(Le(4), 4);
      case 0x94: return Put(memo_.size());
      case 'g': {
        Result<std::string_view> line = Line();
        if (!line.ok()) return line.status();
        return Get(ParseUnsigned(*line));
      }
      case 'h': return Get(Le(1), 1);
      case 'j': return Get(Le(4), 4);
      default:
        return Bad("opcode 0x" + ToHex(op) + " at " + std::to_string(pos_ - 1) + " not read");
    }
  }

  static std::string ToHex(uint8_t b) {
    const char* digits = "0123456789abcdef";
    return {digits[b >> 4], digits[b & 15]};
  }
  bool Has(size_t n) const { return in_.size() - pos_ >= n; }
  Status Skip(size_t n) {
    if (!Has(n)) return Bad("truncated");
    pos_ += n;
    return Status::Ok();
  }
  // A little-endian unsigned of `n` bytes at the cursor, not consumed (the caller checks Has).
  uint64_t Le(size_t n) const {
    if (!Has(n)) return UINT64_MAX;
    uint64_t v = 0;
    for (size_t i = n; i-- > 0;) v = v << 8 | static_cast<uint8_t>(in_[pos_ + i]);
    return v;
  }
  Result<std::string_view> Line() {
    size_t end = in_.find('\n', pos_);
    if (end == std::string_view::npos) return Bad("unterminated line");
    std::string_view line = in_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return line;
  }
  static uint64_t ParseUnsigned(std::string_view s) {
    uint64_t v = UINT64_MAX;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    return ec == std::errc() && p == s.data() + s.size() ? v : UINT64_MAX;
  }

  const Value& V(Ref r) const { return values_[r]; }
  Result<Ref> New(Value v) {
    if (values_.size() >= limits_.max_values) return Bad("more than " + std::to_string(limits_.max_values) + " values");
    values_.push_back(std::move(v));
    return static_cast<Ref>(values_.size() - 1);
  }
  Status Push(Ref r) {
    if (++pushes_ > 2 * limits_.max_values) return Bad("more than " + std::to_string(2 * limits_.max_values) + " pushes");
    stack_.push_back(r);
    return Status::Ok();
  }
  Status PushNew(Value v) {
    Result<Ref> r = New(std::move(v));
    if (!r.ok()) return r.status();
    return Push(*r);
  }
  Status PushInt(uint64_t v, size_t n) {
    if (!Has(n)) return Bad("truncated integer");
    pos_ += n;
    Value value = Of(Kind::kInt);
    value.number = static_cast<int64_t>(v);
    return PushNew(std::move(value));
  }
  Status TextInt(uint8_t op) {
    Result<std::string_view> line = Line();
    if (!line.ok()) return line.status();
    std::string_view s = *line;
    if (op == 'L' && !s.empty() && s.back() == 'L') s.remove_suffix(1);
    if (op == 'I' && (s == "00" || s == "01")) {
      Value v = Of(Kind::kBool);
      v.number = s == "01";
      return PushNew(std::move(v));
    }
    Value v = Of(Kind::kInt);
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v.number);
    if (ec == std::errc::result_out_of_range) {
      v.kind = Kind::kBigInt;
      v.text = *line;
    } else if (ec != std::errc() || p != s.data() + s.size()) {
      return Bad("bad integer text");
    }
    return PushNew(std::move(v));
  }
  // LONG1/LONG4: a little-endian two's complement integer of a counted length.
  Status LongBytes(size_t count_bytes) {
    uint64_t n = Le(count_bytes);
    if (!Has(count_bytes)) return Bad("truncated long");
    pos_ += count_bytes;
    if (!Has(n)) return Bad("truncated long");
    std::string_view bytes = in_.substr(pos_, n);
    pos_ += n;
    Value v = Of(Kind::kInt);
    if (n > 8) {
      v.kind = Kind::kBigInt;
      v.text = bytes;
      return PushNew(std::move(v));
    }
    uint64_t u = 0;
    for (size_t i = n; i-- > 0;) u = u << 8 | static_cast<uint8_t>(bytes[i]);
    if (n > 0 && n < 8 && (static_cast<uint8_t>(bytes[n - 1]) & 0x80)) u |= ~uint64_t{0} << (8 * n);
    v.number = static_cast<int64_t>(u);
    return PushNew(std::move(v));
  }
  Status Text(Kind kind, size_t count_bytes) {
    uint64_t n = Le(count_bytes);
    if (!Has(count_bytes)) return Bad("truncated length");
    pos_ += count_bytes;
    if (!Has(n)) return Bad("a string runs past the end");
    Value v = TextValue(kind, in_.substr(pos_, n));
    pos_ += n;
    return PushNew(std::move(v));
  }
  // UNICODE: a line in raw-unicode-escape (latin-1 with \uXXXX and \UXXXXXXXX), as UTF-8.
  Status RawUnicode() {
    Result<std::string_view> line = Line();
    if (!line.ok()) return line.status();
    const std::string_view s = *line;
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
      uint32_t cp = static_cast<uint8_t>(s[i]);
      const size_t digits = cp == '\\' && i + 1 < s.size() ? (s[i + 1] == 'u' ? 4 : s[i + 1] == 'U' ? 8 : 0) : 0;
      if (digits > 0) {
        if (i + 2 + digits > s.size() ||
            std::from_chars(s.data() + i + 2, s.data() + i + 2 + digits, cp, 16).ptr != s.data() + i + 2 + digits ||
            cp > 0x10FFFF) {
          return Bad("bad escape in UNICODE");
        }
        i += 1 + digits;
      }
      if (cp < 0x80) {
        out += static_cast<char>(cp);
      } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | cp >> 6);
        out += static_cast<char>(0x80 | (cp & 0x3F));
      } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | cp >> 12);
        out += static_cast<char>(0x80 | (cp >> 6 & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      } else {
        out += static_cast<char>(0xF0 | cp >> 18);
        out += static_cast<char>(0x80 | (cp >> 12 & 0x3F));
        out += static_cast<char>(0x80 | (cp >> 6 & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      }
    }
    decoded_.push_back(std::move(out));
    return PushNew(TextValue(Kind::kString, decoded_.back()));
  }
  Result<Ref> Pop() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back())) return Bad("pop of nothing");
    Ref r = stack_.back();
    stack_.pop_back();
    return r;
  }
  Result<std::vector<Ref>> PopMark() {
    if (marks_.empty()) return Bad("no mark");
    size_t from = marks_.back();
    marks_.pop_back();
    std::vector<Ref> items(stack_.begin() + static_cast<ptrdiff_t>(from), stack_.end());
    stack_.resize(from);
    return items;
  }
  Status FromMark(Kind kind) {
    Result<std::vector<Ref>> items = PopMark();
    if (!items.ok()) return items.status();
    if (kind == Kind::kDict && items->size() % 2 != 0) return Bad("odd DICT");
    Value v = Of(kind);
    v.items = std::move(*items);
    return PushNew(std::move(v));
  }
  Status TupleOf(size_t n) {
    if (stack_.size() < n + (marks_.empty() ? 0 : marks_.back())) return Bad("short TUPLE");
    Value v = Of(Kind::kTuple);
    v.items.assign(stack_.end() - static_cast<ptrdiff_t>(n), stack_.end());
    stack_.resize(stack_.size() - n);
    return PushNew(std::move(v));
  }
  Status AddItems(Ref target, const Ref* items, size_t n, bool pairs) {
    Value& t = values_[target];
    const bool ok = pairs ? (t.kind == Kind::kDict || t.kind == Kind::kObject)
                          : (t.kind == Kind::kList || t.kind == Kind::kSet || t.kind == Kind::kObject);
    if (!ok) return Bad("items added to a value of another kind");
    if (t.kind == Kind::kObject && pairs && t.appended_from != t.items.size()) {
      return Bad("SETITEMS after APPENDS on an object");
    }
    t.items.insert(t.items.end(), items, items + n);
    if (pairs && t.kind == Kind::kObject) t.appended_from = t.items.size();
    return Status::Ok();
  }
  Status AddTo(size_t n, bool pairs) {
    const size_t floor = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() < floor + n + 1) return Bad("short APPEND/SETITEM");
    Ref target = stack_[stack_.size() - n - 1];
    Status st = AddItems(target, &stack_[stack_.size() - n], n, pairs);
    stack_.resize(stack_.size() - n);
    return st;
  }
  Status AddToMark(bool pairs) {
    Result<std::vector<Ref>> items = PopMark();
    if (!items.ok()) return items.status();
    if (stack_.empty()) return Bad("items added to nothing");
    if (pairs && items->size() % 2 != 0) return Bad("odd SETITEMS");
    return AddItems(stack_.back(), items->data(), items->size(), pairs);
  }
  Status Put(uint64_t key, size_t n = 0) {
    if (n > 0) {
      if (!Has(n)) return Bad("truncated PUT");
      pos_ += n;
    }
    if (stack_.empty()) return Bad("PUT of nothing");
    if (memo_.size() >= limits_.max_values && !memo_.count(key)) return Bad("memo too large");
    memo_[key] = stack_.back();
    return Status::Ok();
  }
  Status Get(uint64_t key, size_t n = 0) {
    if (n > 0) {
      if (!Has(n)) return Bad("truncated GET");
      pos_ += n;
    }
    auto it = memo_.find(key);
    if (it == memo_.end()) return Bad("GET of a key never PUT");
    return Push(it->second);
  }

  const std::string_view in_;
  const Limits& limits_;
  std::vector<Value>& values_;
  std::deque<std::string>& decoded_;
  size_t pos_ = 0;
  std::vector<Ref> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, Ref> memo_;
  // Every reference a container holds was pushed once: bounding pushes bounds their memory.
  size_t pushes_ = 0;
};

}  // namespace

Result<Pickle> Pickle::Read(std::string_view input, const Limits& limits) {
  Pickle p;
  Reader reader(input, limits, p.values_, p.decoded_);
  Result<Ref> root = reader.Run();
  if (!root.ok()) return root.status();
  p.root_ = *root;
  return p;
}

bool Pickle::IsGlobal(Ref r, std::string_view module, std::string_view name) const {
  return r < values_.size() && values_[r].kind == Kind::kGlobal && values_[r].text == module &&
         values_[r].name == name;
}

bool Pickle::String(Ref r, std::string* out) const {
  if (r >= values_.size() || values_[r].kind != Kind::kString) return false;
  out->assign(values_[r].text);
  return true;
}

bool Pickle::Int(Ref r, int64_t* out) const {
  if (r >= values_.size() || values_[r].kind != Kind::kInt) return false;
  *out = values_[r].number;
  return true;
}

const std::vector<Ref>* Pickle::Sequence(Ref r) const {
  if (r >= values_.size()) return nullptr;
  const Value& v = values_[r];
  return v.kind == Kind::kTuple || v.kind == Kind::kList ? &v.items : nullptr;
}

bool Pickle::Sizes(Ref r, std::vector<uint64_t>* out) const {
  const std::vector<Ref>* items = Sequence(r);
  if (!items) return false;
  out->clear();
  for (Ref item : *items) {
    int64_t v;
    if (!Int(item, &v) || v < 0) return false;
    out->push_back(static_cast<uint64_t>(v));
  }
  return true;
}

Ref Pickle::Get(Ref dict, std::string_view key) const {
  if (dict >= values_.size()) return kNoRef;
  const Value& d = values_[dict];
  if (d.kind != Kind::kDict && d.kind != Kind::kObject) return kNoRef;
  const size_t pairs_end = d.kind == Kind::kDict ? d.items.size() : d.appended_from;
  for (size_t i = 0; i + 1 < pairs_end; i += 2) {
    const Value& k = values_[d.items[i]];
    if (k.kind == Kind::kString && k.text == key) return d.items[i + 1];
  }
  return kNoRef;
}

Ref Pickle::Attr(Ref object, std::string_view key) const {
  if (object >= values_.size() || values_[object].kind != Kind::kObject) return kNoRef;
  Ref state = values_[object].state;
  if (state >= values_.size()) return kNoRef;
  if (values_[state].kind == Kind::kDict) return Get(state, key);
  // (dict or None, slots dict), as objects with __slots__ are pickled.
  const std::vector<Ref>* pair = Sequence(state);
  if (!pair || pair->size() != 2) return kNoRef;
  Ref found = values_[(*pair)[0]].kind == Kind::kDict ? Get((*pair)[0], key) : kNoRef;
  return found != kNoRef ? found : Get((*pair)[1], key);
}

}  // namespace ckptfs::pickle
