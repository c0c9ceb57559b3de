#pragma once
// A non-owning reference to a callable: what a function that calls its argument before returning takes
// instead of std::function, which allocates for captures over two pointers. The referenced callable must
// outlive every call (pass a lambda straight into the call; never store a FunctionRef).
#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>

namespace ringguard {

template <typename Signature>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  FunctionRef() = default;
  FunctionRef(std::nullptr_t) {}  // NOLINT(google-explicit-constructor): no callable, as std::function
  template <typename F, typename = std::enable_if_t<!std::is_same<std::decay_t<F>, FunctionRef>::value &&
                                                    !std::is_same<std::decay_t<F>, std::nullptr_t>::value>>
  FunctionRef(F&& f)  // NOLINT(google-explicit-constructor): converts like std::function
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* object, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(object))(std::forward<Args>(args)...);
        }) {}

  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }
  explicit operator bool() const { return call_ != nullptr; }

 private:
  void* object_ = nullptr;
  R (*call_)(void*, Args...) = nullptr;
};

}  // namespace ringguard
