#include "algorithms/arguments.h"

#include <algorithm>
#include <string>

namespace ringguard {

namespace {
Status invalid(const std::string& what) { return Status(StatusCode::kInvalidArgument, what); }
}  // namespace

Status checkDtype(DataType dtype) {
  return isValid(dtype) ? Status::ok() : invalid("invalid dtype " + std::to_string(int(dtype)));
}

Status checkOp(ReduceOp op, DataType dtype) {
  if (!isValid(op)) {
    if (op == ReduceOp::kPremulSum)
      return invalid("op premul_sum without a factor (makePremulSum makes one)");
    return invalid("invalid reduce op " + std::to_string(int(op)));
  }
  if (reduceSupported(dtype, op)) return Status::ok();
  std::string why;
  if (isFloat8Type(dtype)) {
    why = "float8 dtypes are copy-only (allgather, broadcast, alltoall, send/recv)";
  } else {
    switch (baseOp(op)) {
      case ReduceOp::kBand:
      case ReduceOp::kBor:
      case ReduceOp::kBxor:
        why = "bitwise ops take integer and bool dtypes only";
        break;
      case ReduceOp::kPremulSum:
        why = "premul_sum takes floating and complex dtypes only";
        break;
      case ReduceOp::kAvg:
        why = "avg is not defined on bool";
        break;
      default:
        why = "complex dtypes take sum, avg and premul_sum only (no order, no element-wise product)";
        break;
    }
  }
  return invalid(std::string("op ") + reduceOpName(op) + " does not reduce dtype " + dataTypeName(dtype) +
                 ": " + why);
}

Status checkOpRanks(ReduceOp op, int size) {
  if (size == 1 && isPremulSum(op)) {
    return invalid(
        "premul_sum on a single rank: nothing is reduced, so nothing would be scaled (the collectives "
        "copy; scale the input instead)");
  }
  return Status::ok();
}

Status checkBuffer(const char* what, const void* p, size_t count) {
  if (count > 0 && p == nullptr)
    return invalid(std::string(what) + " buffer is null with count " + std::to_string(count));
  return Status::ok();
}

Status checkDisjoint(const char* a, const void* pa, size_t aBytes, const char* b, const void* pb,
                     size_t bBytes) {
  if (aBytes == 0 || bBytes == 0 || pa == nullptr || pb == nullptr) return Status::ok();
  const auto x = reinterpret_cast<uintptr_t>(pa), y = reinterpret_cast<uintptr_t>(pb);
  if (x < y + bBytes && y < x + aBytes)
    return invalid(std::string(a) + " and " + b + " buffers overlap without being the in-place alias");
  return Status::ok();
}

Status checkRank(const char* what, int r, int size) {
  if (r < 0 || r >= size)
    return invalid(std::string(what) + " " + std::to_string(r) + " is outside [0, " + std::to_string(size) +
                   ")");
  return Status::ok();
}

Status checkSlices(size_t count, DataType dtype, size_t sliceBytes) {
  const size_t perSlice = std::max<size_t>(1, sliceBytes / dataTypeSize(dtype));
  if (count / perSlice + 1 > (size_t(1) << 30)) {
    return invalid("count " + std::to_string(count) + " needs more than 2^30 slices at slice size " +
                   std::to_string(sliceBytes));
  }
  return Status::ok();
}

}  // namespace ringguard
