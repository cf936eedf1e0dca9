// The XDP program an af_xdp port puts on its interface (--port net_af_xdp0,iface=IF@...):
// RoCEv2 frames (UDP to port 4791 over IPv4 or IPv6, untagged or with one 802.1Q tag,
// to any address: the interface's RoCE is the port's) go to the port's AF_XDP socket,
// which reads queue 0 (the port refuses an interface with more receive queues);
// everything else goes on to the kernel's stack, which
// keeps the interface's other traffic (TCP, ARP and ND, which the kernel answers for the
// address it shares with the port). The default program of the PMD (libxdp's) would take
// every frame. Built with clang -target bpf; the PMD loads it (devargs xdp_prog=) and
// fills xsks_map with the port's socket for its queue.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define ROCE_V2_UDP_PORT 4791
#define ETH_P_8021Q_TAG 0x8100

struct {
    __uint(type, BPF_MAP_TYPE_XSKMAP);
    __uint(max_entries, 64);
    __type(key, __u32);
    __type(value, __u32);
} xsks_map SEC(".maps");

struct vlan_tag {
    __be16 tci;
    __be16 protocol;
};

SEC("xdp")
int softhca_roce_redirect(struct xdp_md* ctx) {
    void* data = (void*)(long)ctx->data;
    void* end = (void*)(long)ctx->data_end;
    struct ethhdr* eth = data;
    if ((void*)(eth + 1) > end)
        return XDP_PASS;
    __u16 protocol = eth->h_proto;
    void* next = eth + 1;
    if (protocol == bpf_htons(ETH_P_8021Q_TAG)) {
        struct vlan_tag* tag = next;
        if ((void*)(tag + 1) > end)
            return XDP_PASS;
        protocol = tag->protocol;
        next = tag + 1;
    }
    struct udphdr* udp;
    if (protocol == bpf_htons(ETH_P_IP)) {
        struct iphdr* ip = next;
        if ((void*)(ip + 1) > end || ip->protocol != IPPROTO_UDP || ip->ihl < 5 ||
            (ip->frag_off & bpf_htons(0x3fff))) // a fragment is the kernel's to reassemble
            return XDP_PASS;
        udp = (void*)ip + ip->ihl * 4;
    } else if (protocol == bpf_htons(ETH_P_IPV6)) {
        struct ipv6hdr* ip = next;
        if ((void*)(ip + 1) > end || ip->nexthdr != IPPROTO_UDP)
            return XDP_PASS;
        udp = (void*)(ip + 1);
    } else {
        return XDP_PASS;
    }
    if ((void*)(udp + 1) > end || udp->dest != bpf_htons(ROCE_V2_UDP_PORT))
        return XDP_PASS;
    return bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_PASS);
}

char _license[] SEC("license") = "Dual BSD/GPL";
