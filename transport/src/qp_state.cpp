#include "softhca/transport/qp_state.hpp"

namespace softhca::transport {

namespace {

using namespace qp_attr;

struct Rule {
    bool legal = false;
    uint32_t required = 0;
    uint32_t optional = 0;
};

// One row of the state transition table for a QP type (IBTA 10.3.1 figure 125 and the
// attribute table of ibv_modify_qp(3)).
Rule rule_for(QpType type, QpState from, QpState to) {
    const bool rc = type == QpType::RC;
    const bool ud = type == QpType::UD;
    const uint32_t path_opt = rc || type == QpType::UC ? kAltPath | kPathMigState : 0;
    const uint32_t rts_opt =
        kCurState | (ud ? kQkey : kAccessFlags | path_opt) | (rc ? kMinRnrTimer : 0);
    if (to == QpState::Reset || to == QpState::Error)
        return {true, 0, 0};
    switch (from) {
    case QpState::Reset:
        if (to == QpState::Init)
            return {true, kPkeyIndex | kPort | (ud ? kQkey : kAccessFlags), 0};
        break;
    case QpState::Init:
        if (to == QpState::Init)
            return {true, 0, kPkeyIndex | kPort | (ud ? kQkey : kAccessFlags)};
        if (to == QpState::Rtr) {
            if (ud)
                return {true, 0, kPkeyIndex | kQkey};
            uint32_t required = kAv | kPathMtu | kDestQpn | kRqPsn;
            if (rc)
                required |= kMaxDestRdAtomic | kMinRnrTimer;
            return {true, required, kAltPath | kAccessFlags | kPkeyIndex};
        }
        break;
    case QpState::Rtr:
        if (to == QpState::Rts) {
            uint32_t required = kSqPsn;
            if (rc)
                required |= kTimeout | kRetryCnt | kRnrRetry | kMaxQpRdAtomic;
            return {true, required, rts_opt};
        }
        break;
    case QpState::Rts:
        if (to == QpState::Rts)
            return {true, 0, rts_opt};
        if (to == QpState::Sqd)
            return {true, 0, kEnSqdAsyncNotify};
        break;
    case QpState::Sqd:
        if (to == QpState::Rts)
            return {true, 0, rts_opt};
        if (to == QpState::Sqd)
            return {true, 0,
                    kCurState | kAccessFlags | kPkeyIndex | kQkey | kAv | kPathMtu | kTimeout |
                        kRetryCnt | kRnrRetry | kMaxQpRdAtomic | kMaxDestRdAtomic | kAltPath |
                        kMinRnrTimer | kPathMigState};
        break;
    case QpState::Sqe:
        if (to == QpState::Rts)
            return {true, 0, kCurState | (ud ? kQkey : kAccessFlags)};
        break;
    case QpState::Error:
        break;
    }
    return {};
}

// XRC QPs follow RC's table, each side requiring only what it uses: an initiator has
// no receive side, a target no send side (the rest stays allowed).
Rule xrc_rule_for(QpType type, QpState from, QpState to) {
    Rule rule = rule_for(QpType::RC, from, to);
    uint32_t required = rule.required;
    if (type == QpType::XrcSend && from == QpState::Reset && to == QpState::Init)
        required = kPkeyIndex | kPort;
    else if (type == QpType::XrcSend && from == QpState::Init && to == QpState::Rtr)
        required = kAv | kPathMtu | kDestQpn | kRqPsn;
    else if (type == QpType::XrcRecv && from == QpState::Rtr && to == QpState::Rts)
        required = kTimeout | kSqPsn;
    rule.optional |= rule.required & ~required;
    rule.required = required;
    return rule;
}

} // namespace

bool modify_qp_allowed(QpType type, QpState from, QpState to, uint32_t mask) {
    if (!(mask & kState))
        to = from;
    const bool xrc = type == QpType::XrcSend || type == QpType::XrcRecv;
    if ((type == QpType::RC || xrc) && to == QpState::Sqe)
        return false; // reliable QPs never enter SQE by request (they go to ERR)
    const Rule rule = xrc ? xrc_rule_for(type, from, to) : rule_for(type, from, to);
    if (!rule.legal)
        return false;
    const uint32_t given = mask & ~(kState | kCurState);
    if ((given & rule.required) != rule.required)
        return false;
    return (given & ~(rule.required | rule.optional)) == 0;
}

} // namespace softhca::transport
