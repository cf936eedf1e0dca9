// Registration with libibverbs and the device/context lifecycle.
#include "provider.hpp"

#include "softhca/device_interface/socket_io.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <new>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <unistd.h>

namespace softhca::provider {
namespace {

namespace di = device_interface;

// File in the device directory of the tree that names the engine socket (written by
// kernel_shim); its presence marks a device as ours.
constexpr const char* kEngineSocketFile = "softhca_engine_socket";

bool read_engine_socket(const char* ibdev_path, char* out, size_t capacity) {
    char path[IBV_SYSFS_PATH_MAX + 64];
    std::snprintf(path, sizeof(path), "%s/%s", ibdev_path, kEngineSocketFile);
    FILE* f = std::fopen(path, "re");
    if (!f)
        return false;
    bool ok = std::fgets(out, static_cast<int>(capacity), f) != nullptr;
    std::fclose(f);
    if (!ok)
        return false;
    out[std::strcspn(out, "\n")] = '\0';
    return out[0] != '\0';
}

bool match_device(verbs_sysfs_dev* sysfs_dev) {
    char socket_path[108];
    return read_engine_socket(sysfs_dev->ibdev_path, socket_path, sizeof(socket_path));
}

verbs_device* alloc_device(verbs_sysfs_dev* sysfs_dev) {
    auto* device = static_cast<Device*>(std::calloc(1, sizeof(Device)));
    if (!device)
        return nullptr;
    if (!read_engine_socket(sysfs_dev->ibdev_path, device->engine_socket,
                            sizeof(device->engine_socket))) {
        std::free(device);
        return nullptr;
    }
    return &device->vdev;
}

void uninit_device(verbs_device* vdev) {
    std::free(reinterpret_cast<Device*>(vdev));
}

void free_context(ibv_context* ibctx);

const verbs_context_ops kContextOps = [] {
    verbs_context_ops ops{};
    ops.alloc_pd = alloc_pd;
    ops.create_cq = create_cq;
    ops.create_cq_ex = create_cq_ex;
    ops.create_qp = create_qp;
    ops.destroy_qp = destroy_qp;
    ops.modify_qp = modify_qp;
    ops.post_recv = post_recv;
    ops.post_send = post_send;
    ops.query_qp = query_qp;
    ops.dealloc_pd = dealloc_pd;
    ops.dereg_mr = dereg_mr;
    ops.destroy_cq = destroy_cq;
    ops.free_context = free_context;
    ops.poll_cq = poll_cq;
    ops.query_device_ex = query_device_ex;
    ops.query_rt_values = query_rt_values;
    ops.alloc_parent_domain = alloc_parent_domain;
    ops.alloc_td = alloc_td;
    ops.advise_mr = advise_mr;
    ops.alloc_dm = alloc_dm;
    ops.free_dm = free_dm;
    ops.reg_dm_mr = reg_dm_mr;
    ops.dealloc_td = dealloc_td;
    ops.query_port = query_port;
    ops.reg_mr = reg_mr;
    ops.req_notify_cq = req_notify_cq;
    ops.resize_cq = resize_cq;
    ops.create_srq = create_srq;
    ops.create_srq_ex = create_srq_ex;
    ops.get_srq_num = get_srq_num;
    ops.open_xrcd = open_xrcd;
    ops.close_xrcd = close_xrcd;
    ops.create_qp_ex = create_qp_ex;
    ops.open_qp = open_qp;
    ops.modify_srq = modify_srq;
    ops.query_srq = query_srq;
    ops.destroy_srq = destroy_srq;
    ops.post_srq_recv = post_srq_recv;
    ops.create_ah = create_ah;
    ops.destroy_ah = destroy_ah;
    ops.attach_mcast = attach_mcast;
    ops.alloc_mw = alloc_mw;
    ops.dealloc_mw = dealloc_mw;
    ops.bind_mw = bind_mw;
    ops.rereg_mr = rereg_mr;
    ops.detach_mcast = detach_mcast;
    // Everything else stays libibverbs' default, which fails with EOPNOTSUPP.
    return ops;
}();

// Maps the context's doorbell page (doorbell_page.hpp). Returns 0 or an errno.
int map_doorbell_page(ContextState& state) {
    di::MessageHeader request{};
    di::MapDoorbellsReply reply{};
    int fd = -1;
    if (int err = state.control.call(di::Opcode::MapDoorbells, &request, sizeof(request), &reply,
                                     sizeof(reply), -1, &fd))
        return err;
    if (fd < 0 || reply.bytes < sizeof(di::DoorbellPage)) {
        if (fd >= 0)
            ::close(fd);
        return EPROTO;
    }
    void* map = ::mmap(nullptr, reply.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (map == MAP_FAILED)
        return errno;
    auto* page = static_cast<di::DoorbellPage*>(map);
    if (page->magic != di::kDoorbellPageMagic || page->version != di::kDoorbellPageVersion) {
        ::munmap(map, reply.bytes);
        return EPROTO;
    }
    state.doorbell.page = page;
    state.doorbell_page_bytes = reply.bytes;
    return 0;
}

// Opens the engine connection for one context. Returns 0 or an errno.
int open_engine_context(Device& device, Context& context, ContextState& state) {
    if (int err = state.control.connect(device.engine_socket))
        return err;
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0)
        return errno;
    context.vctx.context.async_fd = pipe_fds[0]; // closed by verbs_uninit_context
    state.async_write_fd = pipe_fds[1];

    di::OpenDeviceRequest open{};
    std::snprintf(open.device_name, sizeof(open.device_name), "%s", device.vdev.device.name);
    open.provider_abi = di::kControlVersion;
    if (::getrandom(open.probe, sizeof(open.probe), 0) != sizeof(open.probe))
        return EIO;
    open.probe_addr = reinterpret_cast<uintptr_t>(open.probe);
    di::OpenDeviceReply opened{};
    // The engine reaches this process's memory only through its own /proc/self/mem:
    // the address space as it is now, which an exec or exit takes away.
    const int memory = ::open("/proc/self/mem", O_RDWR | O_CLOEXEC);
    if (memory < 0) {
        const int err = errno;
        if (err == EACCES && ::prctl(PR_GET_DUMPABLE) == 0)
            std::fprintf(stderr,
                         "softhca: this process is not dumpable (it changed its user or group "
                         "IDs, or runs a set-ID program), so its memory is closed to softhca "
                         "as to a debugger: open the device before changing IDs, or call "
                         "prctl(PR_SET_DUMPABLE, 1) after\n");
        return err == ENOENT ? ENODEV : err;
    }
    const int opened_status =
        state.control.call(di::Opcode::OpenDevice, &open, sizeof(open), &opened, sizeof(opened),
                           state.async_write_fd, &state.doorbell.fd, memory);
    ::close(memory);
    if (opened_status)
        return opened_status;
    state.context_id = opened.context_id;
    if (int err = map_doorbell_page(state))
        return err;

    di::MessageHeader query{};
    di::QueryDeviceReply attrs{};
    if (int err = state.control.call(di::Opcode::QueryDevice, &query, sizeof(query), &attrs,
                                     sizeof(attrs)))
        return err;
    state.attributes = attrs.attr;
    context.vctx.context.num_comp_vectors = static_cast<int>(attrs.attr.num_comp_vectors);
    return start_async_events(state);
}

verbs_context* alloc_context(ibv_device* ibdev, int cmd_fd, void* /*private_data*/) {
    auto* context = static_cast<Context*>(_verbs_init_and_alloc_context(
        ibdev, cmd_fd, sizeof(Context), reinterpret_cast<verbs_context*>(offsetof(Context, vctx)),
        SOFTHCA_RDMA_DRIVER_UNKNOWN));
    if (!context)
        return nullptr;
    auto* state = new (std::nothrow) ContextState;
    if (!state) {
        verbs_uninit_context(&context->vctx);
        std::free(context);
        errno = ENOMEM;
        return nullptr;
    }
    context->state = state;
    auto* device = reinterpret_cast<Device*>(ibdev);
    if (int err = open_engine_context(*device, *context, *state)) {
        free_context(&context->vctx.context);
        errno = err;
        return nullptr;
    }
    verbs_set_ops(&context->vctx, &kContextOps);
    return &context->vctx;
}

void free_context(ibv_context* ibctx) {
    Context* context = to_context(ibctx);
    ContextState* state = context->state;
    stop_async_events(*state);
    if (state->async_write_fd >= 0)
        ::close(state->async_write_fd);
    if (state->doorbell.fd >= 0)
        ::close(state->doorbell.fd);
    if (state->doorbell.page)
        ::munmap(state->doorbell.page, state->doorbell_page_bytes);
    delete state; // closes the control socket: the engine frees what is left
    verbs_uninit_context(&context->vctx);
    std::free(context);
}

const verbs_device_ops kDeviceOps = {
    .name = "softhca",
    .match_min_abi_version = 1,
    .match_max_abi_version = 6,
    .match_table = nullptr,
    .static_providers = nullptr,
    .match_device = match_device,
    .alloc_context = alloc_context,
    .import_context = nullptr,
    .alloc_device = alloc_device,
    .uninit_device = uninit_device,
};

__attribute__((constructor)) void register_provider() {
    verbs_register_driver_34(&kDeviceOps);
}

} // namespace
} // namespace softhca::provider
