// `softhca status`: the engine's state as one JSON document (schema in
// docs/status-schema.md, `softhca status --json`), and the text report rendered from it.
// Every figure is put into the document once; the text is a view of the document.
#include "control_server.hpp"
#include "engine_qp.hpp"
#include "engine_srq.hpp"
#include "qp_hw_counters.hpp"
#include "shared_mapping.hpp"
#include "softhca/transport/path_mtu.hpp"
#include "softhca/transport/priority_flow_control.hpp"
#include "softhca/transport/roce_address.hpp"

#include <arpa/inet.h>
#include <cstdio>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>
#include <unordered_map>

namespace softhca::engine {

using Json = StatusDocument;

namespace {

const char* qp_state_name(transport::QpState state) {
    static constexpr const char* kNames[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
    return kNames[static_cast<size_t>(state)];
}

const char* qp_type_name(transport::QpType type) {
    switch (type) {
    case transport::QpType::RC:
        return "RC";
    case transport::QpType::UC:
        return "UC";
    case transport::QpType::UD:
        return "UD";
    case transport::QpType::XrcSend:
        return "XRC_INI";
    case transport::QpType::XrcRecv:
        return "XRC_TGT";
    }
    return "?";
}

Json port_counters(const PortCounters& k) {
    return {{"rx_packets", k.rx_packets},
            {"rx_bytes", k.rx_bytes},
            {"tx_packets", k.tx_packets},
            {"tx_bytes", k.tx_bytes},
            {"tx_dropped", k.tx_dropped},
            {"rx_unhandled", k.rx_unhandled},
            {"rx_bad_icrc", k.rx_bad_icrc},
            {"rx_malformed", k.rx_malformed},
            {"rx_no_qp", k.rx_no_qp},
            {"rx_wrong_source", k.rx_wrong_source},
            {"arp_requests", k.arp_requests},
            {"arp_replies", k.arp_replies},
            {"nd_solicitations", k.nd_solicitations},
            {"nd_advertisements", k.nd_advertisements},
            {"kernel_resolutions", k.kernel_resolutions},
            {"rx_neighbor_dropped", k.rx_neighbor_dropped},
            {"rx_mads", k.rx_mads},
            {"rx_mads_dropped", k.rx_mads_dropped},
            {"tx_mads", k.tx_mads},
            {"rx_ecn_ce", k.rx_ecn_ce},
            {"tx_cnps", k.tx_cnps},
            {"rx_cnps", k.rx_cnps},
            {"tx_cnps_dropped", k.tx_cnps_dropped},
            {"rx_pfc_frames", k.rx_pfc_frames},
            {"tx_pfc_frames", k.tx_pfc_frames},
            {"tx_pfc_waits", k.tx_pfc_waits}};
}

// Priority flow control (--pfc), null when off: the priorities it is enabled for and those
// paused each way (bit p: priority p) when last looked at.
Json pfc_document(const PortInfo& p) {
    if (!p.pfc)
        return nullptr;
    return {{"priorities", p.pfc_priorities}, // those PFC is enabled for
            {"paused_by_peer", p.pfc_paused_by_peer},
            {"asked_peer", p.pfc_asked_peer},
            // 512 bit times at the port's rate: how long one quantum of a pause lasts.
            {"quantum_ns", transport::kPfcQuantumBits * 1e9 / p.line_rate_bps()}};
}

// The shaped link and its ECN marking (congestion_point.hpp), null when off.
Json congestion_point_document(const PortInfo& p) {
    const CongestionPointConfig& c = p.congestion_point;
    if (!c.shaper.enabled())
        return nullptr;
    const CongestionPointCounters& k = p.congestion_point_counters;
    Json ecn = nullptr;
    if (c.ecn_marking)
        ecn = {{"kmin_bytes", c.ecn_marking->kmin_bytes},
               {"kmax_bytes", c.ecn_marking->kmax_bytes},
               {"pmax", c.ecn_marking->pmax}};
    Json vls = Json::array(); // the VLs that carried anything
    for (size_t vl = 0; vl < k.vls.size(); ++vl) {
        const VlQueueCounters& q = k.vls[vl];
        if (!q.queued && !q.dropped)
            continue;
        Json lane = {{"vl", vl},
                     {"queued", q.queued},
                     {"dropped", q.dropped},
                     {"marked", q.marked},
                     {"sent_bytes", q.sent_bytes},
                     {"queue_bytes", q.queue_bytes},
                     {"peak_queue_bytes", q.peak_queue_bytes}};
        if (k.credits && vl < transport::kCreditDataVls) {
            // The link-level credits of a data VL (link_flow_control.hpp), both ends.
            lane["credit_fctbs"] = q.credits.fctbs;
            lane["credit_fccl"] = q.credits.fccl;
            lane["credit_available_blocks"] = q.credits.available;
            lane["credit_abr"] = q.credits.abr;
            lane["credit_advertised"] = q.credits.advertised;
            lane["credit_waits"] = q.credits.waits;
            lane["credit_waiting"] = q.credits.waiting;
        }
        vls.push_back(lane);
    }
    Json credits = nullptr;
    if (k.credits)
        credits = {{"buffer_blocks", k.credit_buffer_blocks},
                   {"flow_control_sent", k.flow_control_sent},
                   {"flow_control_received", k.flow_control_received},
                   {"flow_control_bad", k.flow_control_bad}};
    Json doc = {{"shape", describe(c.shaper)},
                {"ecn_marking", ecn},
                {"arbitration", c.arbitration.to_string()},
                {"sl_to_vl", p.sl_to_vl.to_string()},
                {"link_credits", credits},
                {"vls", vls}};
    doc["queue_bytes"] = k.queue_bytes;
    doc["peak_queue_bytes"] = k.peak_queue_bytes;
    doc["queued"] = k.queued;
    doc["dropped"] = k.dropped;
    doc["marked"] = k.marked;
    doc["above_kmax"] = k.above_kmax;
    return doc;
}

// A QP's DCQCN state (qp_congestion.hpp), null when the engine runs none.
Json qp_congestion_document(const EngineQp& qp) {
    const auto& cc = qp.congestion();
    if (!cc)
        return nullptr;
    return {{"rate_mbps", cc->rate.rate_bps() / 1e6},
            {"target_mbps", cc->rate.target_bps() / 1e6},
            {"alpha", cc->rate.alpha()},
            {"limited", cc->rate.limited()},
            {"ce_received", cc->ce_received},
            {"cnps_sent", cc->cnps_sent},
            {"cnps_received", cc->cnps_received},
            {"paced", cc->paced}};
}

Json qp_document(const EngineQp& qp) {
    const transport::QpCounters& k = qp.transport().counters();
    return {{"qpn", qp.qp_num()},
            {"type", qp_type_name(qp.type())},
            {"state", qp_state_name(qp.transport().state())},
            {"dest_qp", qp.transport().attributes().dest_qp},
            {"sq_psn", qp.transport().requester_psn()},
            {"rq_psn", qp.transport().responder_psn()},
            {"srq", qp.srq() != nullptr},
            {"counters",
             {{"packets_sent", k.packets_sent},
              {"packets_received", k.packets_received},
              {"retransmitted", k.retransmitted_packets},
              {"timeouts", k.timeouts},
              {"naks_sent", k.naks_sent},
              {"naks_received", k.naks_received},
              {"rnr_naks_sent", k.rnr_naks_sent},
              {"rnr_naks_received", k.rnr_naks_received},
              {"duplicates", k.duplicates},
              {"out_of_sequence", k.out_of_sequence},
              {"dropped", k.dropped},
              {"dropped_messages", k.dropped_messages},
              {"qkey_violations", k.qkey_violations},
              {"sequence_naks_received", k.sequence_naks_received},
              {"retries_exceeded", k.retries_exceeded},
              {"rnr_retries_exceeded", k.rnr_retries_exceeded},
              {"retries", k.retries},
              {"sends_completed", k.sends_completed},
              {"receives_completed", k.receives_completed},
              {"placed_messages", k.placed_messages},
              {"placed_bytes", k.placed_bytes},
              {"cq_overruns", qp.cq_overruns()}}},
            {"congestion", qp_congestion_document(qp)}};
}

// " name value" for each member of a flat object of numbers.
void put_pairs(std::ostream& out, const Json& object) {
    for (const auto& [name, value] : object.items())
        out << " " << name << " " << value.dump();
}

// The fabric inside the engine (--fabric), null without one: every egress port of every
// link (a switch's or a NIC's) and every switch.
Json fabric_document(const FabricStatus& f) {
    if (f.description.empty())
        return nullptr;
    Json egress = Json::array();
    for (const FabricStatus::Egress& e : f.egress)
        egress.push_back({{"from", e.from},
                          {"to", e.to},
                          {"rate_bps", e.rate_bps},
                          {"delay_ns", e.delay_ns},
                          {"up", e.up},
                          {"frames", e.frames},
                          {"bytes", e.bytes},
                          {"link_down", e.link_down},
                          {"queued", e.queued},
                          {"dropped", e.dropped},
                          {"marked", e.marked},
                          {"pauses", e.pauses},
                          {"paused", e.paused},
                          {"queue_bytes", e.queue_bytes},
                          {"peak_queue_bytes", e.peak_queue_bytes},
                          {"queue_limit_bytes", e.queue_limit_bytes}});
    Json switches = Json::array();
    for (const FabricStatus::Switch& s : f.switches)
        switches.push_back({{"name", s.name},
                            {"tier", s.tier},
                            {"forwarded", s.forwarded},
                            {"no_route", s.no_route}});
    Json namespaces = nullptr;
    if (!f.namespaces.empty())
        namespaces = f.namespaces;
    return {{"description", f.description},   {"routing", f.routing},
            {"time_ns", f.time_ns},           {"endpoints", f.endpoints},
            {"namespaces", namespaces},       {"egress", std::move(egress)},
            {"switches", std::move(switches)}};
}

} // namespace

StatusDocument ControlServer::qp_counters_document(size_t device, bool sees_all,
                                                   const Connection* viewer) const {
    const QpCounterSets& sets = keys_.qp_counter_sets;
    static constexpr const char* kModes[] = {"none", "auto", "manual"};
    Json counters = Json::array();
    const auto live = [&](uint32_t qpn) -> const transport::QpCounters* {
        const auto& qps = keys_.qps_by_device.at(device);
        const auto it = qps.find(qpn);
        return it == qps.end() ? nullptr : &it->second->transport().counters();
    };
    for (const auto& [id, counter] : sets.counters(device)) {
        const QpCounterSets::Owner& owner = counter.owner;
        if (!sees_all && (owner.uid != viewer->uid || owner.pidns != viewer->pidns))
            continue;
        Json qps = Json::array();
        for (const auto& [qpn, at_bind] : counter.qps)
            qps.push_back(qpn);
        const transport::QpCounters counted = QpCounterSets::counted(counter, live);
        Json values = Json::object();
        for (const QpHwCounter& c : kQpHwCounters)
            values[c.name] = counted.*c.value;
        counters.push_back({{"id", id},
                            {"mode", kModes[static_cast<size_t>(counter.mode)]},
                            {"mask", counter.mask},
                            {"qp_type", qp_type_name(counter.qp_type)},
                            {"pid", sees_all ? owner.pid : owner.ns_pid},
                            {"command", owner.command},
                            {"qps", qps},
                            {"counters", values}});
    }
    return {{"qp_counter_mode", kModes[static_cast<size_t>(sets.mode(device))]},
            {"qp_counter_mask", sets.mask(device)},
            {"qp_counters", counters}};
}

StatusDocument ControlServer::status_document_for(const Connection* viewer) const {
    static const ino_t engine_pidns = [] {
        struct stat st {};
        return ::stat("/proc/self/ns/pid", &st) == 0 ? st.st_ino : ino_t{0};
    }();
    const bool sees_all = !viewer || (viewer->uid == 0 && viewer->pidns == engine_pidns);
    Json doc;
    doc["schema"] = "softhca-status";
    doc["version"] = 1;
    doc["engine"] = {{"pid", ::getpid()}, {"prefix", prefix_}};
    if (engine_status_)
        doc["engine"].update(engine_status_());
    Json& devices = doc["devices"] = Json::array();
    for (size_t index = 0; index < devices_.size(); ++index) {
        const Device& d = devices_[index];
        if (d.removed)
            continue; // `rdma link delete`
        const PortInfo& p = ports_.info(d.port_index);
        const transport::QpCounters qp_counters = keys_.qp_counters_of_device(index);
        const auto attr = port_attributes(p);
        char mac[20];
        std::snprintf(mac, sizeof(mac), "%02x:%02x:%02x:%02x:%02x:%02x", p.mac[0], p.mac[1],
                      p.mac[2], p.mac[3], p.mac[4], p.mac[5]);
        Json gids = Json::array();
        for (size_t g = 0; g < p.gids.size(); ++g) {
            char text[INET6_ADDRSTRLEN] = "?";
            inet_ntop(AF_INET6, p.gids[g].data(), text, sizeof(text));
            gids.push_back({{"index", g}, {"gid", text}});
        }
        Json device = {
            {"name", d.name},
            {"port", 1},
            {"state", p.link_up ? "ACTIVE" : "DOWN"},
            {"admin_up", p.admin_up},
            {"ipv4", p.ipv4 ? Json(transport::ipv4_to_string(p.ipv4)) : Json(nullptr)},
            {"mac", mac},
            {"mtu", p.eth_mtu},
            {"active_mtu",
             transport::path_mtu_bytes(static_cast<transport::PathMtu>(attr.active_mtu))},
            {"pmd", p.pmd},
            {"devargs", p.devargs.empty() ? Json(nullptr) : Json(p.devargs)},
            {"gids", gids},
            {"counters", port_counters(p.counters)},
            {"faults", nullptr},
            {"congestion_point", congestion_point_document(p)},
            {"pfc", pfc_document(p)},
            {"placed",
             {{"messages", qp_counters.placed_messages}, {"bytes", qp_counters.placed_bytes}}}};
        device.update(qp_counters_document(index, sees_all, viewer));
        if (p.faults.enabled())
            device["faults"] = {{"dropped", p.faults.dropped},
                                {"duplicated", p.faults.duplicated},
                                {"reordered", p.faults.reordered},
                                {"corrupted", p.faults.corrupted}};
        devices.push_back(std::move(device));
    }
    Json& contexts = doc["contexts"] = Json::array();
    size_t pds = 0, mrs = 0, cqs = 0, qps = 0;
    for (const auto& [fd, c] : connections_) {
        if (!c.resources)
            continue;
        const auto& r = *c.resources;
        pds += r.pd_count();
        mrs += r.mr_count();
        cqs += r.cq_count();
        qps += r.qp_count();
        if (!sees_all && (c.uid != viewer->uid || c.pidns != viewer->pidns))
            continue;
        Json qp_list = Json::array();
        for (const auto& [handle, qp] : r.qps())
            qp_list.push_back(qp_document(*qp));
        // The other objects, as `rdma resource show cq|mr|pd` lists them (the context's
        // handle numbers them; users: what holds each).
        Json cq_list = Json::array(), mr_list = Json::array(), pd_list = Json::array();
        for (const auto& [handle, cq] : r.cqs())
            cq_list.push_back({{"handle", handle}, {"cqe", cq.cqe}, {"users", cq.qp_count}});
        for (const auto& [handle, mr] : r.mrs())
            mr_list.push_back({{"handle", handle},
                               {"pd", mr.pd_handle},
                               {"lkey", mr.lkey},
                               {"rkey", mr.rkey},
                               {"iova", mr.iova},
                               {"length", mr.length}});
        for (const auto& [handle, pd] : r.pds())
            pd_list.push_back({{"handle", handle},
                               {"users", pd.mr_count + pd.mw_count + pd.qp_count + pd.srq_count}});
        // SRQs, as `rdma resource show srq` lists them: an XRC SRQ's CQ by its handle, and
        // the QPs that receive from each.
        // (One pass over the QPs and the CQs: each SRQ's lists are looked up.)
        Json srq_list = Json::array();
        if (!r.srqs().empty()) {
            std::unordered_map<const EngineSrq*, Json> receivers;
            for (const auto& [qp_handle, qp] : r.qps())
                if (qp->srq())
                    receivers[qp->srq()].push_back(qp->qp_num());
            std::unordered_map<const CompletionQueue*, uint32_t> cq_handles;
            for (const auto& [cq_handle, cq] : r.cqs())
                cq_handles[&cq] = cq_handle;
            for (const auto& [handle, srq] : r.srqs()) {
                const auto receiving = receivers.find(srq.get());
                const auto cq = cq_handles.find(srq->xrc_cq());
                srq_list.push_back(
                    {{"handle", handle},
                     {"srqn", srq->srq_num()},
                     {"type", srq->xrc_cq() ? "XRC" : "BASIC"},
                     {"pd", srq->pd_handle()},
                     {"cq", cq != cq_handles.end() ? Json(cq->second) : Json(nullptr)},
                     {"max_wr", srq->max_wr()},
                     {"qps", receiving != receivers.end() ? receiving->second : Json::array()}});
            }
        }
        contexts.push_back({{"id", c.context_id},
                            {"pid", sees_all ? c.pid : c.ns_pid},
                            {"command", c.command},
                            {"device", devices_[static_cast<size_t>(c.device)].name},
                            {"objects",
                             {{"pd", r.pd_count()},
                              {"mr", r.mr_count()},
                              {"cq", r.cq_count()},
                              {"qp", r.qp_count()}}},
                            {"engine_bytes", r.usage().bytes},
                            {"pinned",
                             {{"bytes", r.pinned()},
                              {"limit", r.client().memlock_limit() == UINT64_MAX
                                            ? Json(nullptr)
                                            : Json(r.client().memlock_limit())}}},
                            {"qps", std::move(qp_list)},
                            {"cqs", std::move(cq_list)},
                            {"mrs", std::move(mr_list)},
                            {"pds", std::move(pd_list)},
                            {"srqs", std::move(srq_list)}});
    }
    doc["refused_contexts"] = refused_connections_;
    auto caps = [](const ResourceUsage& u) {
        return Json{{"qps", u.qps},
                    {"cqs", u.cqs},
                    {"srqs", u.srqs},
                    {"mrs", u.mrs},
                    {"pds", u.pds},
                    {"mws", u.mws},
                    {"dm_bytes", u.dm_bytes},
                    {"attachments", u.attachments},
                    {"bytes", u.bytes == UINT64_MAX ? Json(nullptr) : Json(u.bytes)}};
    };
    const ResourceLimits& limits = keys_.limits;
    Json user = caps(limits.user);
    user["connections"] = limits.user_connections;
    user["cm_files"] = limits.user_cm_files;
    user["cm_ids"] = limits.user_cm_ids;
    Json engine = caps(kEngineMaxima.objects);
    engine["connections"] = kEngineMaxima.connections;
    engine["cm_files"] = kEngineMaxima.cm_files;
    engine["cm_ids"] = kEngineMaxima.cm_ids;
    doc["limits"] = {{"context", caps(limits.context)}, {"user", user}, {"engine", engine}};
    doc["objects"] = {{"pd", pds}, {"mr", mrs}, {"cq", cqs}, {"qp", qps}};
    // MRs on shared memory the engine has mapped (shared_mapping.hpp).
    doc["memory"] = {{"mapped_mr", SharedMapping::live()}};
    doc["rdma_cm"] = rdma_cm_status_ ? rdma_cm_status_(sees_all, viewer ? viewer->uid : 0,
                                                       viewer ? viewer->pidns : 0)
                                     : Json(nullptr);
    doc["fabric"] = fabric_document(ports_.fabric_status());
    return doc;
}

std::string status_text(const Json& doc) {
    std::ostringstream out;
    out << "engine pid " << doc["engine"]["pid"] << " prefix "
        << doc["engine"]["prefix"].get<std::string>();
    if (const auto threads = doc["engine"].find("datapath_threads");
        threads != doc["engine"].end()) {
        out << " datapath_threads " << threads->size() << " (ports";
        for (const Json& thread : *threads) {
            out << ' ';
            const char* separator = "";
            for (const Json& port : thread["ports"]) {
                out << separator << port.get<size_t>();
                separator = ",";
            }
        }
        out << ')';
    }
    out << "\n";
    for (const Json& d : doc["devices"]) {
        const std::string state = d["state"] == "ACTIVE"      ? "ACTIVE"
                                  : d["admin_up"].get<bool>() ? "DOWN"
                                                              : "DOWN (admin)";
        out << "device " << d["name"].get<std::string>() << " port 1: " << state << " ipv4 "
            << (d["ipv4"].is_null() ? "0.0.0.0" : d["ipv4"].get<std::string>()) << " mac "
            << d["mac"].get<std::string>() << " mtu " << d["mtu"] << " active_mtu "
            << d["active_mtu"] << " pmd " << d["pmd"].get<std::string>() << ' '
            << (!d["devargs"].is_null() ? d["devargs"].get<std::string>()
                : d["pmd"] == "fabric"  ? "(fabric)"
                                        : "(built-in wire)")
            << "\n";
        out << "  gids:";
        for (const Json& g : d["gids"])
            out << " " << g["index"] << " " << g["gid"].get<std::string>();
        out << "\n  counters:";
        put_pairs(out, d["counters"]);
        out << "\n  placed:";
        put_pairs(out, d["placed"]);
        out << "\n";
        if (!d["pfc"].is_null()) {
            out << "  pfc:";
            put_pairs(out, d["pfc"]);
            out << "\n";
        }
        if (!d["faults"].is_null()) {
            out << "  faults injected:";
            put_pairs(out, d["faults"]);
            out << "\n";
        }
        if (const Json& cp = d["congestion_point"]; !cp.is_null()) {
            out << "  shaped link " << cp["shape"].get<std::string>() << ":";
            for (const auto& [name, value] : cp.items())
                if (value.is_number())
                    out << " " << name << " " << value.dump();
            out << "\n";
            out << "    vl arbitration " << cp["arbitration"].get<std::string>() << "; sl to vl "
                << cp["sl_to_vl"].get<std::string>() << "\n";
            if (const Json& credits = cp["link_credits"]; !credits.is_null()) {
                out << "    link credits:";
                put_pairs(out, credits);
                out << "\n";
            }
            for (const Json& vl : cp["vls"]) {
                out << "    vl " << vl["vl"] << ":";
                for (const auto& [name, value] : vl.items())
                    if (name != "vl")
                        out << " " << name << " " << value.dump();
                out << "\n";
            }
        }
    }
    for (const Json& c : doc["contexts"]) {
        out << "context " << c["id"] << " pid " << c["pid"] << " ("
            << c["command"].get<std::string>() << ") device " << c["device"].get<std::string>()
            << ":";
        put_pairs(out, c["objects"]);
        out << "\n";
        for (const Json& q : c["qps"]) {
            out << "  qp " << q["qpn"] << " " << q["type"].get<std::string>() << " "
                << q["state"].get<std::string>() << " dest_qp " << q["dest_qp"]
                << (q["srq"].get<bool>() ? " srq" : "") << ":";
            put_pairs(out, q["counters"]);
            out << "\n";
            if (const Json& cc = q["congestion"]; !cc.is_null()) {
                out << "    dcqcn:";
                put_pairs(out, cc);
                out << "\n";
            }
        }
    }
    out << "contexts " << doc["contexts"].size()
        << " (refused for lack of descriptors: " << doc["refused_contexts"] << ")\n";
    out << "objects:";
    put_pairs(out, doc["objects"]);
    out << "\nmemory: mapped mr " << doc["memory"]["mapped_mr"] << "\n";
    if (const auto fabric = doc.find("fabric"); fabric != doc.end() && !fabric->is_null()) {
        out << "fabric: " << (*fabric)["description"].get<std::string>() << "\n";
        if (const Json& ns = (*fabric)["namespaces"]; !ns.is_null()) {
            out << "  hosts' network namespaces:";
            std::string last;
            for (const Json& name : ns)
                if (name.get<std::string>() != last)
                    out << " " << (last = name.get<std::string>());
            out << "\n";
        }
        for (const Json& s : (*fabric)["switches"])
            out << "  switch " << s["name"].get<std::string>() << ": forwarded " << s["forwarded"]
                << " no_route " << s["no_route"] << "\n";
        for (const Json& e : (*fabric)["egress"]) {
            out << "  " << e["from"].get<std::string>() << " -> " << e["to"].get<std::string>()
                << (e["up"].get<bool>() ? "" : " (down)") << ":";
            for (const char* name : {"frames", "bytes", "dropped", "marked", "pauses", "link_down",
                                     "queue_bytes", "peak_queue_bytes"})
                out << " " << name << " " << e[name].dump();
            out << "\n";
        }
    }
    if (const Json& cm = doc["rdma_cm"]; !cm.is_null()) {
        out << "rdma_cm:";
        for (const auto& [name, value] : cm.items())
            if (!value.is_object())
                out << " " << name << " " << value.dump();
        put_pairs(out, cm["counters"]);
        out << "\n";
    }
    return out.str();
}

} // namespace softhca::engine
