// The control server's memory requests: protection domains, memory regions, memory
// windows, device memory and XRC domains. Each is validated by the resource tables;
// replies carry errno values.
#include "control_messages.hpp"
#include "control_server.hpp"

#include <cerrno>

namespace softhca::engine {

namespace di = device_interface;

namespace {
// The context's grant page, for a reply that names a revoked slot (the provider waits
// there for copies under way, grant_page.hpp); -1 for none.
int page_for_slot(const ContextResources& resources, uint32_t grant_slot) {
    return grant_slot != di::kNoGrantSlot ? resources.grant_page().share() : -1;
}

di::RegMrReply mr_reply(const di::MessageHeader& header, int status, const RegisteredMr& mr) {
    di::RegMrReply r{};
    r.reply.header = reply_header(header, sizeof(r));
    r.reply.status = status;
    r.mr_handle = mr.handle;
    r.lkey = mr.lkey;
    r.rkey = mr.rkey;
    r.grant_slot = status == 0 ? mr.grant_slot : di::kNoGrantSlot;
    return r;
}
} // namespace

void ControlServer::alloc_pd(Call& call) {
    di::HandleReply r{};
    r.reply.header = reply_header(call.header, sizeof(r));
    r.reply.status = call.resources().alloc_pd(r.handle);
    reply(call, &r, sizeof(r));
}

void ControlServer::dealloc_pd(Call& call) {
    reply_status(call, call.resources().dealloc_pd(call.request<di::HandleRequest>().handle));
}

void ControlServer::reg_mr(Call& call) {
    RegisteredMr mr{};
    const int status = call.resources().reg_mr(call.request<di::RegMrRequest>(), mr);
    const di::RegMrReply r = mr_reply(call.header, status, mr);
    reply(call, &r, sizeof(r));
}

void ControlServer::rereg_mr(Call& call) {
    RegisteredMr mr{};
    const int status = call.resources().rereg_mr(call.request<di::ReregMrRequest>(), mr);
    const di::RegMrReply r = mr_reply(call.header, status, mr);
    reply_sharing(call, &r, sizeof(r), page_for_slot(call.resources(), r.grant_slot));
}

void ControlServer::dereg_mr(Call& call) {
    di::DeregMrReply r{};
    r.reply.header = reply_header(call.header, sizeof(r));
    r.reply.status =
        call.resources().dereg_mr(call.request<di::HandleRequest>().handle, r.grant_slot);
    reply_sharing(call, &r, sizeof(r), page_for_slot(call.resources(), r.grant_slot));
}

void ControlServer::alloc_mw(Call& call) {
    const auto& request = call.request<di::AllocMwRequest>();
    di::AllocMwReply r{};
    r.reply.header = reply_header(call.header, sizeof(r));
    r.reply.status =
        call.resources().alloc_mw(request.pd_handle, request.type, r.mw_handle, r.rkey);
    reply(call, &r, sizeof(r));
}

void ControlServer::dealloc_mw(Call& call) {
    reply_status(call, call.resources().dealloc_mw(call.request<di::HandleRequest>().handle));
}

void ControlServer::alloc_dm(Call& call) {
    const auto& request = call.request<di::AllocDmRequest>();
    const DeviceMemory* dm = nullptr;
    di::AllocDmReply r{};
    r.reply.header = reply_header(call.header, sizeof(r));
    r.reply.status =
        call.resources().alloc_dm(request.length, request.log_align_req, r.dm_handle, dm);
    if (dm)
        r.bytes = dm->memory.bytes();
    reply_sharing(call, &r, sizeof(r), dm ? dm->memory.share() : -1);
}

void ControlServer::free_dm(Call& call) {
    reply_status(call, call.resources().free_dm(call.request<di::HandleRequest>().handle));
}

void ControlServer::reg_dm_mr(Call& call) {
    RegisteredMr mr{};
    const int status = call.resources().reg_dm_mr(call.request<di::RegDmMrRequest>(), mr);
    const di::RegMrReply r = mr_reply(call.header, status, mr);
    reply(call, &r, sizeof(r));
}

void ControlServer::open_xrcd(Call& call) {
    // ibv_open_xrcd(3): a domain of its own (no file), or the one a file names (its
    // descriptor comes along).
    const auto& request = call.request<di::OpenXrcdRequest>();
    di::HandleReply r{};
    r.reply.header = reply_header(call.header, sizeof(r));
    r.reply.status =
        request.with_fd && call.fd < 0
            ? EBADF
            : call.resources().open_xrcd(request.with_fd ? call.fd : -1, request.oflags, r.handle);
    reply(call, &r, sizeof(r));
}

void ControlServer::close_xrcd(Call& call) {
    reply_status(call, call.resources().close_xrcd(call.request<di::HandleRequest>().handle));
}

} // namespace softhca::engine
