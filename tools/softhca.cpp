// softhca: the command line for software HCAs.
//
//   softhca up [--prefix P] [--port DEVARGS@ADDR[,ADDR...][%NETDEV]]... [--mtu N] [--memory-mb MB]
//   softhca down [--prefix P]
//   softhca status [--prefix P] [--json]
//   softhca watch [--prefix P] [--interval SECONDS] [--count N]
//   softhca sample [--prefix P] [--interval SECONDS] [--count N] [--output CSV]
//   softhca env [--prefix P] [--container]
//   softhca exec [--prefix P] [--host NAME] -- CMD [ARGS...]
//   softhca port [--prefix P] DEVICE down|up
//   softhca fabric [--prefix P] link NODE NODE down|up | switch NAME down|up
//
// The prefix defaults to $SOFTHCA_PREFIX, else "softhca" (devices softhca0, softhca1).
#include "instance.hpp"
#include "sample.hpp"
#include "watch.hpp"

#include "softhca/device_interface/manifest.hpp"
#include "softhca/device_interface/registration.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <linux/capability.h>
#include <nlohmann/json.hpp>
#include <sched.h>
#include <string>
#include <string_view>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace softhca::tools;
namespace fs = std::filesystem;

namespace {

int usage() {
    std::cerr
        << "usage: softhca up [--prefix P] [--port DEVARGS@ADDR[,ADDR...][%NETDEV]]... [--mtu N]\n"
           "                  [--memory-mb MB] [--faults drop=P,dup=P,reorder=P,corrupt=P,seed=N]\n"
           "                  [--pcap PATH_PREFIX] [--shape rate_mbps=R,delay_us=D,queue_kb=Q]\n"
           "                  [--ecn kmin_kb=K,kmax_kb=K,pmax=P] [--dcqcn on|PARAMETERS]\n"
           "                  [--vl-arbitration TABLES] [--sl-to-vl SL:VL,...]\n"
           "                  [--link-credits on|buffer_kb=K,refresh_us=U] [--threads N]\n"
           "                  [--fabric leaf-spine|fat-tree|rail:KEY=VALUE,...]\n"
           "       softhca down [--prefix P]\n"
           "       softhca status [--prefix P] [--json]\n"
           "       softhca watch [--prefix P] [--interval SECONDS] [--count N]\n"
           "       softhca sample [--prefix P] [--interval SECONDS] [--count N] [--output CSV]\n"
           "       softhca env [--prefix P] [--container]\n"
           "       softhca exec [--prefix P] [--host NAME] -- CMD [ARGS...]\n"
           "       softhca port [--prefix P] DEVICE down|up\n"
           "       softhca fabric [--prefix P] link NODE NODE down|up\n"
           "       softhca fabric [--prefix P] switch NAME down|up\n"
           "Without --port, up creates two devices wired back to back inside the\n"
           "engine (P0 at 198.18.0.1, P1 at 198.18.0.2).\n";
    return 2;
}

std::string self_dir() {
    std::error_code ec;
    return fs::read_symlink("/proc/self/exe", ec).parent_path();
}

// Whether this is the build tree's softhca (then its parts are the build tree's too).
bool in_build_tree() {
    std::error_code ec;
    return fs::equivalent(self_dir(), SOFTHCA_BUILD_TOOLS_DIR, ec);
}

// The first of the candidates that exists (suffix appended for the check).
std::string locate(const std::vector<std::string>& candidates, const char* suffix = "") {
    for (const auto& c : candidates)
        if (!c.empty() && fs::exists(c + suffix))
            return fs::weakly_canonical(c).string();
    return {};
}

// Each part: the build tree's for the build tree's softhca; otherwise where an install
// puts it relative to this binary (any prefix, a package, a copied tree), then the
// configured install location.
std::string part(const char* build, const std::string& relative, const char* installed,
                 const char* suffix = "") {
    if (in_build_tree())
        return locate({build}, suffix);
    return locate({self_dir() + "/" + relative, installed}, suffix);
}

// A part named by the environment (SOFTHCA_ENGINE, SOFTHCA_PROVIDER, SOFTHCA_PRELOAD): the
// canonical path of FILE, or, when it does not exist, an error naming the variable (a
// build that was asked for and is missing must not be replaced by another silently).
std::string chosen_part(const char* variable, const std::string& file) {
    if (!fs::exists(file)) {
        std::cerr << "softhca: " << variable << " names " << file << ", which does not exist\n";
        std::exit(1);
    }
    return fs::weakly_canonical(file).string();
}

std::string engine_binary() {
    // SOFTHCA_ENGINE: another engine binary for `up` (a sanitizer build, tools/sanitize.sh).
    if (const char* chosen = std::getenv("SOFTHCA_ENGINE"); chosen && *chosen)
        return chosen_part("SOFTHCA_ENGINE", chosen);
    return part(SOFTHCA_BUILD_ENGINE, SOFTHCA_REL_LIBEXEC_DIR "/softhca-engine",
                SOFTHCA_INSTALL_ENGINE);
}

// SOFTHCA_PROVIDER and SOFTHCA_PRELOAD: another provider (its libsofthca-rdmav34.so) for
// `up`, and another preload library for `exec` and `env` (a ThreadSanitizer build of
// them, tools/tsan.sh).
std::string provider_prefix() {
    constexpr std::string_view suffix = "-rdmav34.so";
    if (const char* chosen = std::getenv("SOFTHCA_PROVIDER"); chosen && *chosen) {
        const std::string library = chosen_part("SOFTHCA_PROVIDER", chosen);
        if (!library.ends_with(suffix)) {
            std::cerr << "softhca: SOFTHCA_PROVIDER names " << chosen
                      << ", which is no provider (libNAME" << suffix << ")\n";
            std::exit(1);
        }
        return library.substr(0, library.size() - suffix.size());
    }
    return part(SOFTHCA_BUILD_PROVIDER_PREFIX, SOFTHCA_REL_LIB_DIR "/libsofthca",
                SOFTHCA_INSTALL_PROVIDER_PREFIX, suffix.data());
}

std::string preload_library() {
    if (const char* chosen = std::getenv("SOFTHCA_PRELOAD"); chosen && *chosen)
        return chosen_part("SOFTHCA_PRELOAD", chosen);
    return part(SOFTHCA_BUILD_PRELOAD, SOFTHCA_REL_LIB_DIR "/libsofthca-preload.so",
                SOFTHCA_INSTALL_PRELOAD);
}

bool wait_for(const std::function<bool()>& condition, std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
        if (condition())
            return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return condition();
}

void print_log_tail(const Instance& instance) {
    std::ifstream log(instance.log_path());
    std::string line;
    while (std::getline(log, line))
        std::cerr << "  engine: " << line << "\n";
}

// Least privilege (README, Security model; the same set as softhca.service): the engine
// is started with only the capabilities it uses in its bounding set, and no new
// privileges, so a flaw in it cannot use the rest of root's.
void keep_only_engine_capabilities() {
    if (::geteuid() != 0)
        return;
    constexpr int kKept[] = {CAP_CHECKPOINT_RESTORE, CAP_SYS_PTRACE, CAP_SETUID,  CAP_SETGID,
                             CAP_SYS_ADMIN,          CAP_NET_ADMIN,  CAP_NET_RAW, CAP_IPC_LOCK,
                             CAP_SYS_NICE,           CAP_MKNOD,      CAP_CHOWN,   CAP_FOWNER,
                             CAP_DAC_OVERRIDE};
    for (int cap = 0; cap <= CAP_LAST_CAP; ++cap)
        if (std::find(std::begin(kKept), std::end(kKept), cap) == std::end(kKept))
            ::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);
    ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
}

int cmd_up(const Instance& instance, const std::vector<std::string>& engine_args) {
    if (pid_t pid = instance.running_engine()) {
        std::string text;
        if (query_engine_status(instance, text) == 0) {
            std::cout << "softhca: " << instance.prefix << " is already up (engine pid " << pid
                      << ")\n";
            return 0;
        }
    }
    const std::string engine = engine_binary();
    const std::string provider = provider_prefix();
    if (engine.empty() || provider.empty()) {
        std::cerr << "softhca: cannot find " << (engine.empty() ? "softhca-engine" : "the provider")
                  << " (build the project first)\n";
        return 1;
    }
    fs::create_directories(instance.run_dir);
    softhca::device_interface::Manifest(instance.manifest_path()).remove_all();
    ::unlink(instance.pid_path().c_str());

    std::vector<std::string> args = {engine,   "--run-dir", instance.run_dir, "--provider-prefix",
                                     provider, "--prefix",  instance.prefix};
    args.insert(args.end(), engine_args.begin(), engine_args.end());
    pid_t child = ::fork();
    if (child < 0) {
        std::perror("softhca: fork");
        return 1;
    }
    if (child == 0) {
        ::setsid();
        keep_only_engine_capabilities();
        int log = ::open(instance.log_path().c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int null = ::open("/dev/null", O_RDONLY);
        ::dup2(null, 0);
        ::dup2(log, 1);
        ::dup2(log, 2);
        std::vector<char*> argv;
        for (auto& a : args)
            argv.push_back(a.data());
        argv.push_back(nullptr);
        ::execv(argv[0], argv.data());
        std::perror("exec softhca-engine");
        ::_exit(127);
    }
    int status = 0;
    bool exited = false;
    bool ready = wait_for(
        [&] {
            if (::waitpid(child, &status, WNOHANG) == child) {
                exited = true;
                return true;
            }
            std::string text;
            return instance.running_engine() == child && query_engine_status(instance, text) == 0;
        },
        std::chrono::seconds(30));
    if (!ready || exited) {
        std::cerr << "softhca: the engine did not come up\n";
        print_log_tail(instance);
        if (!exited) {
            ::kill(child, SIGKILL);
            ::waitpid(child, nullptr, 0);
        }
        softhca::device_interface::Manifest(instance.manifest_path()).remove_all();
        return 1;
    }
    std::string text;
    query_engine_status(instance, text);
    std::cout << text;
    return 0;
}

// exec --host NAME: into the network namespace of a fabric's host (softhca up --fabric
// ...,netns=1), as `ip netns exec` enters one: a mount namespace of its own too, whose /sys
// shows that namespace's interfaces. Needs root (CAP_SYS_ADMIN), as ip netns exec does.
int enter_host(const Instance& instance, const std::string& host) {
    const bool named =
        !host.empty() &&
        host.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789") == std::string::npos;
    if (!named || !fs::is_directory(instance.host_sysfs_root(host))) {
        std::cerr << "softhca: " << instance.prefix << " has no host " << host
                  << " in a network namespace of its own (softhca up --fabric ...,netns=1)\n";
        return 1;
    }
    const std::string name = instance.prefix + "-" + host;
    const std::string path = "/run/netns/" + name;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0) {
        const int err = errno;
        std::cerr << "softhca: cannot enter the network namespace " << name << ": "
                  << std::strerror(err) << (err == EPERM ? " (it takes root)" : "") << "\n";
        return 1;
    }
    ::close(fd);
    // /sys stays read-only if it was.
    struct statvfs sys {};
    const unsigned long sys_flags =
        ::statvfs("/sys", &sys) == 0 && (sys.f_flag & ST_RDONLY) ? MS_RDONLY : 0;
    if (::unshare(CLONE_NEWNS) != 0 || ::mount("", "/", "none", MS_SLAVE | MS_REC, nullptr) != 0 ||
        (::umount2("/sys", MNT_DETACH) != 0 && errno != EINVAL) ||
        ::mount(name.c_str(), "/sys", "sysfs", sys_flags, nullptr) != 0) {
        std::cerr << "softhca: cannot mount /sys for " << name << ": " << std::strerror(errno)
                  << "\n";
        return 1;
    }
    return 0;
}

// fabric switch NAME down|up: every link of the switch at once, as a switch that fails
// (or comes back) takes all of them with it.
int cmd_fabric_switch(const Instance& instance, const std::string& name, bool up) {
    std::string text;
    if (int err = query_engine_status(instance, text, true)) {
        std::cerr << "softhca: " << instance.prefix << ": " << std::strerror(err) << "\n";
        return 1;
    }
    const nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
    const nlohmann::json& fabric = doc.is_object() ? doc["fabric"] : nlohmann::json();
    if (!fabric.is_object()) {
        std::cerr << "softhca: fabric switch " << name << ": the engine runs no fabric\n";
        return 1;
    }
    bool known = false;
    for (const auto& s : fabric["switches"])
        known |= s["name"] == name;
    if (!known) {
        std::cerr << "softhca: fabric switch " << name << ": no such switch\n";
        return 1;
    }
    for (const auto& e : fabric["egress"]) {
        if (e["from"] != name)
            continue;
        const std::string to = e["to"];
        if (int err = set_fabric_link(instance, name, to, up)) {
            std::cerr << "softhca: fabric link " << name << " " << to << ": " << std::strerror(err)
                      << "\n";
            return 1;
        }
    }
    std::cout << "softhca: fabric switch " << name << (up ? " up" : " down") << "\n";
    return 0;
}

int cmd_down(const Instance& instance) {
    if (pid_t pid = instance.running_engine()) {
        ::kill(pid, SIGTERM);
        auto gone = [&] { return ::kill(pid, 0) != 0 && errno == ESRCH; };
        if (!wait_for(gone, std::chrono::seconds(10))) {
            ::kill(pid, SIGKILL);
            wait_for(gone, std::chrono::seconds(5));
        }
    }
    // Whatever the engine did not remove itself (it may have been killed).
    int failures = softhca::device_interface::Manifest(instance.manifest_path()).remove_all();
    std::error_code ec;
    fs::remove_all(instance.run_dir, ec);
    ::rmdir(fs::path(instance.run_dir).parent_path().c_str()); // only when empty
    if (failures || ec) {
        std::cerr << "softhca: could not remove everything of " << instance.prefix << "\n";
        return 1;
    }
    std::cout << "softhca: " << instance.prefix << " is down\n";
    return 0;
}

// What a container needs to use this host's engine, as `docker run`/`podman run` options:
// the instance's run directory (the engine's sockets and the sysfs tree libibverbs reads),
// the driver file naming the provider, the directory of the provider and the preload
// library (read-only), each device's uverbs node (libibverbs opens it; every verb goes
// to the engine instead), and the environment `softhca exec` sets. The container brings
// its own libibverbs (rdma-core of the same ABI, e.g. Debian 12's).
int cmd_env_container(const Instance& instance) {
    // The device tree lists the uverbs nodes the engine made (class/infiniband_verbs).
    std::error_code ec;
    std::vector<std::string> nodes;
    for (const auto& entry :
         fs::directory_iterator(instance.sysfs_root() + "/class/infiniband_verbs", ec))
        if (entry.path().filename().string().ends_with("_uverbs"))
            nodes.push_back("/dev/infiniband/" + entry.path().filename().string());
    if (nodes.empty()) {
        std::cerr << "softhca: " << instance.prefix << " is not up\n";
        return 1;
    }
    std::sort(nodes.begin(), nodes.end());
    const std::string preload = preload_library();
    const std::string provider = provider_prefix();
    if (preload.empty() || provider.empty()) {
        std::cerr << "softhca: cannot find the provider and the preload library\n";
        return 1;
    }
    const std::string provider_dir = fs::path(provider).parent_path();
    const std::string preload_dir = fs::path(preload).parent_path();
    std::cout << "-v " << instance.run_dir << ":" << instance.run_dir << " -v "
              << instance.driver_path() << ":" << instance.driver_path() << ":ro -v "
              << provider_dir << ":" << provider_dir << ":ro";
    if (preload_dir != provider_dir)
        std::cout << " -v " << preload_dir << ":" << preload_dir << ":ro";
    for (const auto& node : nodes)
        std::cout << " --device " << node;
    std::cout << " -e SYSFS_PATH=" << instance.sysfs_root() << " -e LD_PRELOAD=" << preload << "\n";
    return 0;
}

int cmd_status(const Instance& instance, bool json) {
    std::string text;
    if (int err = query_engine_status(instance, text, json)) {
        std::cerr << "softhca: " << instance.prefix << " is not up (" << std::strerror(err)
                  << ")\n";
        return 1;
    }
    if (json)
        std::cout << nlohmann::ordered_json::parse(text).dump(2) << "\n";
    else
        std::cout << text;
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    if (argc < 2)
        return usage();
    const std::string command = argv[1];
    const char* env_prefix = std::getenv("SOFTHCA_PREFIX");
    std::string prefix = env_prefix && *env_prefix ? env_prefix : "softhca";
    std::vector<std::string> rest;
    std::string host; // exec --host
    int i = 2;
    for (; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--") {
            ++i;
            break;
        }
        if (arg == "--prefix" && i + 1 < argc)
            prefix = argv[++i];
        else if (arg == "--host" && i + 1 < argc && command == "exec")
            host = argv[++i];
        else
            rest.push_back(arg);
    }
    // The engine's rule: the prefix names files under /run and /etc, so nothing else.
    if (!softhca::device_interface::valid_instance_prefix(prefix)) {
        std::cerr << "softhca: the prefix must be 1..32 characters of [a-z0-9_]\n";
        return 2;
    }
    const Instance instance = Instance::named(prefix);

    if (command == "up")
        return cmd_up(instance, rest);
    if (command == "port") {
        if (rest.size() != 2 || (rest[1] != "up" && rest[1] != "down"))
            return usage();
        if (int err = set_port_state(instance, rest[0], rest[1] == "up")) {
            std::cerr << "softhca: port " << rest[0] << " " << rest[1] << ": " << std::strerror(err)
                      << "\n";
            return 1;
        }
        std::cout << "softhca: " << rest[0] << " port 1 " << rest[1] << "\n";
        return 0;
    }
    if (command == "fabric" && rest.size() == 3 && rest[0] == "switch" &&
        (rest[2] == "up" || rest[2] == "down"))
        return cmd_fabric_switch(instance, rest[1], rest[2] == "up");
    if (command == "fabric") {
        if (rest.size() != 4 || rest[0] != "link" || (rest[3] != "up" && rest[3] != "down"))
            return usage();
        if (int err = set_fabric_link(instance, rest[1], rest[2], rest[3] == "up")) {
            std::cerr << "softhca: fabric link " << rest[1] << " " << rest[2] << " " << rest[3]
                      << ": "
                      << (err == ENOENT       ? "no such link"
                          : err == EOPNOTSUPP ? "the engine runs no fabric"
                                              : std::strerror(err))
                      << "\n";
            return 1;
        }
        std::cout << "softhca: fabric link " << rest[1] << " " << rest[2] << " " << rest[3] << "\n";
        return 0;
    }
    if (command == "status" && rest.size() == 1 && rest[0] == "--json")
        return cmd_status(instance, true);
    if (command == "watch")
        return cmd_watch(instance, rest);
    if (command == "sample")
        return cmd_sample(instance, rest);
    if (command == "env" && rest.size() == 1 && rest[0] == "--container")
        return cmd_env_container(instance);
    if (!rest.empty() && command != "exec")
        return usage();
    if (command == "down")
        return cmd_down(instance);
    if (command == "status")
        return cmd_status(instance, false);
    if (command == "env") {
        std::cout << "export SYSFS_PATH=" << instance.sysfs_root() << "\n";
        if (const std::string preload = preload_library(); !preload.empty())
            std::cout << "export LD_PRELOAD=" << preload << "${LD_PRELOAD:+:$LD_PRELOAD}\n";
        return 0;
    }
    if (command == "exec") {
        if (i >= argc || !rest.empty())
            return usage();
        std::string sysfs = instance.sysfs_root();
        if (!host.empty()) {
            if (int rc = enter_host(instance, host))
                return rc;
            sysfs = instance.host_sysfs_root(host);
        }
        ::setenv("SYSFS_PATH", sysfs.c_str(), 1);
        // Completion channels, hard-coded sysfs paths, RDMA netlink (kernel_shim/preload).
        if (const std::string preload = preload_library(); !preload.empty()) {
            const char* existing = std::getenv("LD_PRELOAD");
            const std::string value = existing && *existing ? preload + ":" + existing : preload;
            ::setenv("LD_PRELOAD", value.c_str(), 1);
        }
        ::execvp(argv[i], argv + i);
        std::cerr << "softhca: cannot run " << argv[i] << ": " << std::strerror(errno) << "\n";
        return 127;
    }
    return usage();
}
