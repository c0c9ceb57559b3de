#pragma once
// The slice of NVML's C API the PCIe source calls, declared here because the library loads NVML with
// dlopen at run time and must build where nvml.h is not installed. Layouts and values as in nvml.h
// (NVML API version 12; nvmlFieldValue_t is 40 bytes: fieldId@0 scopeId@4 timestamp@8 latencyUsec@16
// valueType@24 nvmlReturn@28 value@32).
#include <cstdint>

namespace ringguard {
namespace nvml {

using Return = int;  // nvmlReturn_t
constexpr Return kSuccess = 0;
using Device = struct DeviceOpaque*;  // nvmlDevice_t

constexpr unsigned kFieldPcieTxBytes = 197;       // NVML_FI_DEV_PCIE_COUNT_TX_BYTES
constexpr unsigned kFieldPcieRxBytes = 198;       // NVML_FI_DEV_PCIE_COUNT_RX_BYTES
constexpr unsigned kFieldNvlinkTxKiB = 138;       // NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX (KiB)
constexpr unsigned kFieldNvlinkRxKiB = 139;       // NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX (KiB)
constexpr unsigned kScopeAllLinks = 0xFFFFFFFFu;  // scopeId UINT_MAX: summed over every link

// nvmlValueType_t
enum ValueType : int {
  kDouble = 0,
  kUnsignedInt = 1,
  kUnsignedLong = 2,
  kUnsignedLongLong = 3,
  kSignedLongLong = 4,
  kSignedInt = 5,
  kUnsignedShort = 6,
};

union Value {
  double dVal;
  int siVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  long long sllVal;
  unsigned short usVal;
};

struct FieldValue {
  unsigned int fieldId;
  unsigned int scopeId;
  long long timestamp;  // microseconds since 1970
  long long latencyUsec;
  int valueType;  // ValueType
  Return nvmlReturn;
  Value value;
};
static_assert(sizeof(FieldValue) == 40, "nvmlFieldValue_t is 40 bytes");

using InitFn = Return (*)();
using ShutdownFn = Return (*)();
using ErrorStringFn = const char* (*)(Return);
using GetHandleByIndexFn = Return (*)(unsigned int, Device*);
using GetHandleByPciBusIdFn = Return (*)(const char*, Device*);
using GetFieldValuesFn = Return (*)(Device, int, FieldValue*);
using GetUintFn = Return (*)(Device, unsigned int*);

}  // namespace nvml
}  // namespace ringguard
