#pragma once
// The variant registry: per operator family the implementations that exist in this process, each with an
// "enabled" predicate (the platform supports it, its resources exist). Like Horovod's operation manager,
// firstEnabled() picks the first enabled one in registration order; the PolicyEngine instead picks among
// the enabled ones by its rules. Implementations are stored type-erased (std::any) and fetched typed.
#include <any>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "ringguard/core/status.h"

namespace ringguard {

class VariantRegistry {
 public:
  using Enabled = std::function<bool()>;

  // kInvalidArgument for an empty name or a (family, name) registered twice. `enabled` null: always.
  Status add(const std::string& family, const std::string& name, Enabled enabled = nullptr,
             std::any implementation = {});
  bool has(const std::string& family, const std::string& name) const;
  // Registered and its predicate says yes.
  bool enabled(const std::string& family, const std::string& name) const;
  // The first enabled variant of `family` in registration order, or "" when none.
  std::string firstEnabled(const std::string& family) const;
  std::vector<std::string> variants(const std::string& family) const;  // registration order
  std::vector<std::string> families() const;

  // The implementation registered as (family, name), cast to T; nullptr when absent or of another type.
  template <typename T>
  const T* implementation(const std::string& family, const std::string& name) const {
    std::lock_guard<std::mutex> lock(mu_);
    const Entry* e = find(family, name);
    return e == nullptr ? nullptr : std::any_cast<T>(&e->implementation);
  }

 private:
  struct Entry {
    std::string name;
    Enabled enabled;
    std::any implementation;
  };
  const Entry* find(const std::string& family, const std::string& name) const;

  mutable std::mutex mu_;
  std::map<std::string, std::vector<Entry>> families_;  // guarded by mu_
};

}  // namespace ringguard
