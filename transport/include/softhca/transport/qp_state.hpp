// Queue pair states and the rules of ibv_modify_qp: which transitions exist and which
// attributes each one requires and allows (IBTA 11.2.5.2 / 10.3.1, the QP state
// transition table). Mask bits are numerically those of enum ibv_qp_attr_mask.
#pragma once

#include <cstdint>

namespace softhca::transport {

enum class QpState : uint8_t { Reset = 0, Init = 1, Rtr = 2, Rts = 3, Sqd = 4, Sqe = 5, Error = 6 };

// ibv_qp_type values; XRC initiators (XrcSend) only send, XRC targets (XrcRecv) only
// receive, into the XRC SRQ each message names.
enum class QpType : uint8_t { RC = 2, UC = 3, UD = 4, XrcSend = 9, XrcRecv = 10 };

namespace qp_attr {
constexpr uint32_t kState = 1u << 0;
constexpr uint32_t kCurState = 1u << 1;
constexpr uint32_t kEnSqdAsyncNotify = 1u << 2;
constexpr uint32_t kAccessFlags = 1u << 3;
constexpr uint32_t kPkeyIndex = 1u << 4;
constexpr uint32_t kPort = 1u << 5;
constexpr uint32_t kQkey = 1u << 6;
constexpr uint32_t kAv = 1u << 7;
constexpr uint32_t kPathMtu = 1u << 8;
constexpr uint32_t kTimeout = 1u << 9;
constexpr uint32_t kRetryCnt = 1u << 10;
constexpr uint32_t kRnrRetry = 1u << 11;
constexpr uint32_t kRqPsn = 1u << 12;
constexpr uint32_t kMaxQpRdAtomic = 1u << 13;
constexpr uint32_t kAltPath = 1u << 14;
constexpr uint32_t kMinRnrTimer = 1u << 15;
constexpr uint32_t kSqPsn = 1u << 16;
constexpr uint32_t kMaxDestRdAtomic = 1u << 17;
constexpr uint32_t kPathMigState = 1u << 18;
constexpr uint32_t kCap = 1u << 19;
constexpr uint32_t kDestQpn = 1u << 20;
} // namespace qp_attr

// True when `from` -> `to` is a legal transition for this QP type and `mask` holds
// every attribute it requires and nothing it does not allow (kState is always
// required and kCurState always allowed). `to` is ignored when kState is absent
// (a modify without a state change, which only the current state's self-transition
// rules govern).
bool modify_qp_allowed(QpType type, QpState from, QpState to, uint32_t mask);

} // namespace softhca::transport
