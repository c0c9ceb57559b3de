#include "ringguard/policy/registry.h"

#include <utility>

namespace ringguard {

Status VariantRegistry::add(const std::string& family, const std::string& name, Enabled enabled,
                            std::any implementation) {
  if (family.empty() || name.empty()) {
    return Status(StatusCode::kInvalidArgument,
                  "VariantRegistry::add: family and variant names must not be empty");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (find(family, name) != nullptr) {
    return Status(StatusCode::kInvalidArgument, "VariantRegistry::add: variant '" + name + "' of family '" +
                                                    family + "' is already registered");
  }
  families_[family].push_back(Entry{name, std::move(enabled), std::move(implementation)});
  return Status::ok();
}

const VariantRegistry::Entry* VariantRegistry::find(const std::string& family,
                                                    const std::string& name) const {
  auto it = families_.find(family);
  if (it == families_.end()) return nullptr;
  for (const Entry& e : it->second) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

bool VariantRegistry::has(const std::string& family, const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  return find(family, name) != nullptr;
}

bool VariantRegistry::enabled(const std::string& family, const std::string& name) const {
  Enabled predicate;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const Entry* e = find(family, name);
    if (e == nullptr) return false;
    if (!e->enabled) return true;
    predicate = e->enabled;
  }
  return predicate();  // outside the lock: a predicate may take its own locks (Python's GIL)
}

std::string VariantRegistry::firstEnabled(const std::string& family) const {
  for (const std::string& name : variants(family)) {
    if (enabled(family, name)) return name;
  }
  return "";
}

std::vector<std::string> VariantRegistry::variants(const std::string& family) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  auto it = families_.find(family);
  if (it != families_.end()) {
    for (const Entry& e : it->second) out.push_back(e.name);
  }
  return out;
}

std::vector<std::string> VariantRegistry::families() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& kv : families_) out.push_back(kv.first);
  return out;
}

}  // namespace ringguard
