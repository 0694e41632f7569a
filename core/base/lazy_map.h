// LazyMap: a std::map that allocates nothing until its first entry is made, so that it costs
// 8 bytes where most instances stay empty (an inode's children: every file has a pair of such
// maps). Iterators are std::map's; those of a map never made come from one shared empty map,
// which nothing changes. Not thread-safe: its owner guards it.
#pragma once

#include <cstddef>
#include <map>
#include <memory>

namespace ckptfs {

template <typename Key, typename Value>
class LazyMap {
 public:
  using Map = std::map<Key, Value>;
  using iterator = typename Map::iterator;
  using const_iterator = typename Map::const_iterator;

  LazyMap() = default;
  LazyMap(const LazyMap& other) : map_(other.map_ ? std::make_unique<Map>(*other.map_) : nullptr) {}
  LazyMap& operator=(const LazyMap& other) {
    map_ = other.map_ ? std::make_unique<Map>(*other.map_) : nullptr;
    return *this;
  }
  LazyMap(LazyMap&&) noexcept = default;
  LazyMap& operator=(LazyMap&&) noexcept = default;

  bool empty() const { return !map_ || map_->empty(); }
  size_t size() const { return map_ ? map_->size() : 0; }
  size_t count(const Key& key) const { return map_ ? map_->count(key) : 0; }

  iterator begin() { return map_ ? map_->begin() : None().begin(); }
  iterator end() { return map_ ? map_->end() : None().end(); }
  const_iterator begin() const { return map_ ? map_->cbegin() : None().cbegin(); }
  const_iterator end() const { return map_ ? map_->cend() : None().cend(); }
  iterator find(const Key& key) { return map_ ? map_->find(key) : None().end(); }
  const_iterator find(const Key& key) const { return map_ ? map_->find(key) : None().cend(); }

  Value& operator[](const Key& key) { return Made()[key]; }
  size_t erase(const Key& key) { return map_ ? map_->erase(key) : 0; }
  // Requires an iterator of this map's entries (not end()).
  iterator erase(iterator it) { return map_->erase(it); }
  // Erases the entries for which `pred(entry)` holds.
  template <typename Pred>
  void erase_if(Pred pred) {
    if (map_) std::erase_if(*map_, pred);
  }
  void clear() { map_.reset(); }

 private:
  static Map& None() {
    static Map none;
    return none;
  }
  Map& Made() {
    if (!map_) map_ = std::make_unique<Map>();
    return *map_;
  }

  std::unique_ptr<Map> map_;
};

}  // namespace ckptfs
