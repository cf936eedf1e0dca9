// One side of a UD multicast exchange between processes (and namespaces), for the
// end-to-end tests:
//   mcast_peer receive DEVICE GROUP_IPV4 COUNT READY_FILE
//       two UD QPs post COUNT receives each and join the group; READY_FILE is created
//       once they have; each must receive COUNT datagrams whole (within 30 s), else exit 1
//   mcast_peer send DEVICE GROUP_IPV4 COUNT
//       sends COUNT datagrams to the group (destination QP 0xFFFFFF)
// Every datagram is 256 bytes: its number, then a pattern of it.
#include "test_device.hpp"

#include <arpa/inet.h>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>
#include <vector>

namespace {

constexpr uint32_t kQkey = 0x600d;
constexpr uint32_t kBytes = 256;
constexpr uint32_t kGrh = 40;

[[noreturn]] void die(const char* what) {
    std::fprintf(stderr, "mcast_peer: %s\n", what);
    std::exit(1);
}

uint8_t pattern(uint32_t message, uint32_t i) {
    return static_cast<uint8_t>(message * 29 + i * 3);
}

ibv_qp* ud_qp(ibv_pd* pd, ibv_cq* cq, uint32_t receives) {
    ibv_qp_init_attr init{};
    init.send_cq = init.recv_cq = cq;
    init.qp_type = IBV_QPT_UD;
    init.cap = {64, receives, 1, 1, 0};
    ibv_qp* qp = ibv_create_qp(pd, &init);
    if (!qp)
        die("create_qp");
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qkey = kQkey;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
        die("modify INIT");
    a = {};
    a.qp_state = IBV_QPS_RTR;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
        die("modify RTR");
    a.qp_state = IBV_QPS_RTS;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
        die("modify RTS");
    return qp;
}

} // namespace

int main(int argc, char** argv) {
    if (argc < 5)
        die("usage: receive|send DEVICE GROUP_IPV4 COUNT [READY_FILE]");
    const bool receive = std::strcmp(argv[1], "receive") == 0;
    const uint32_t count = static_cast<uint32_t>(std::atoi(argv[4]));
    if (count == 0 || count > 4096)
        die("COUNT is 1 to 4096");
    in_addr ip{};
    if (inet_pton(AF_INET, argv[3], &ip) != 1)
        die("bad group address");
    ibv_gid group{};
    group.raw[10] = group.raw[11] = 0xff;
    std::memcpy(group.raw + 12, &ip, 4);
    ibv_context* context = open_test_device(argv[2]);
    if (!context)
        die("open device");
    ibv_pd* pd = ibv_alloc_pd(context);
    ibv_cq* cq = ibv_create_cq(context, 2 * static_cast<int>(count), nullptr, nullptr, 0);
    if (!pd || !cq)
        die("pd/cq");
    std::vector<uint8_t> buffer(size_t{count} * 2 * (kBytes + kGrh));
    ibv_mr* mr = ibv_reg_mr(pd, buffer.data(), buffer.size(), IBV_ACCESS_LOCAL_WRITE);
    if (!mr)
        die("reg_mr");

    if (receive) {
        if (argc < 6)
            die("receive needs READY_FILE");
        // A receive for every datagram, posted before joining: UD has no flow control,
        // and a receiver that reposted as it went ran out when the machine was loaded
        // and the engine's receiving thread fell behind the sender's.
        ibv_qp* qps[2] = {ud_qp(pd, cq, count), ud_qp(pd, cq, count)};
        const uint32_t slot = kBytes + kGrh;
        auto post = [&](int q, uint32_t index) {
            ibv_sge sge{reinterpret_cast<uintptr_t>(buffer.data()) + (q * count + index) * slot,
                        slot, mr->lkey};
            ibv_recv_wr wr{};
            wr.wr_id = q * count + index;
            wr.sg_list = &sge;
            wr.num_sge = 1;
            ibv_recv_wr* bad = nullptr;
            if (ibv_post_recv(qps[q], &wr, &bad))
                die("post_recv");
        };
        for (int q = 0; q < 2; ++q) {
            for (uint32_t i = 0; i < count; ++i)
                post(q, i);
            if (ibv_attach_mcast(qps[q], &group, 0))
                die("attach_mcast");
        }
        std::ofstream(argv[5]) << "ready\n";
        uint32_t got[2] = {0, 0};
        std::vector<bool> seen[2] = {std::vector<bool>(count), std::vector<bool>(count)};
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while ((got[0] < count || got[1] < count) && std::chrono::steady_clock::now() < deadline) {
            ibv_wc wc[16];
            const int n = ibv_poll_cq(cq, 16, wc);
            for (int i = 0; i < n; ++i) {
                if (wc[i].status != IBV_WC_SUCCESS || wc[i].byte_len != kGrh + kBytes ||
                    !(wc[i].wc_flags & IBV_WC_GRH))
                    die("a bad completion");
                const uint8_t* at = buffer.data() + wc[i].wr_id * slot + kGrh;
                uint32_t message = 0;
                std::memcpy(&message, at, 4);
                for (uint32_t k = 4; k < kBytes; ++k)
                    if (at[k] != pattern(message, k))
                        die("a corrupted datagram");
                const int q = wc[i].qp_num == qps[0]->qp_num ? 0 : 1;
                if (message >= count || seen[q][message])
                    die("a datagram not sent, or one received twice");
                seen[q][message] = true;
                ++got[q];
            }
            if (n == 0)
                std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
        std::printf("received %u and %u of %u datagrams\n", got[0], got[1], count);
        return got[0] == count && got[1] == count ? 0 : 1;
    }

    ibv_qp* qp = ud_qp(pd, cq, 1);
    ibv_ah_attr ah_attr{};
    ah_attr.is_global = 1;
    ah_attr.grh.dgid = group;
    ah_attr.grh.hop_limit = 1;
    ah_attr.port_num = 1;
    ibv_ah* ah = ibv_create_ah(pd, &ah_attr);
    if (!ah)
        die("create_ah");
    for (uint32_t m = 0; m < count; ++m) {
        uint8_t* at = buffer.data() + (m % 64) * kBytes;
        std::memcpy(at, &m, 4);
        for (uint32_t k = 4; k < kBytes; ++k)
            at[k] = pattern(m, k);
        ibv_sge sge{reinterpret_cast<uintptr_t>(at), kBytes, mr->lkey};
        ibv_send_wr wr{};
        wr.wr_id = m;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_SEND;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.ud.ah = ah;
        wr.wr.ud.remote_qpn = 0xffffff;
        wr.wr.ud.remote_qkey = kQkey;
        ibv_send_wr* bad = nullptr;
        if (ibv_post_send(qp, &wr, &bad))
            die("post_send");
        ibv_wc wc{};
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        int n = 0;
        while ((n = ibv_poll_cq(cq, 1, &wc)) == 0 && std::chrono::steady_clock::now() < deadline) {
        }
        if (n != 1 || wc.status != IBV_WC_SUCCESS)
            die("send did not complete");
        // Paced, so that a receiving port's queues are not what is tested.
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    std::printf("sent %u datagrams\n", count);
    return 0;
}
