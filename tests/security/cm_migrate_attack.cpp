// Attack (issue 40, item 3): take another process's rdma_cm id with MIGRATE_ID by way of
// a PID that once held one of the attacker's rdma_cm files.
//
// MIGRATE_ID is written on the file an id moves to and names, by descriptor number, the
// file it is on now; the kernel finds that file in the caller's own descriptor table.
// So does the engine: the preload library passes the descriptor the caller holds at that
// number, and the engine takes the file whose pipe it is. Here the opener opens an
// rdma_cm file, forks the attacker (who keeps that file) and exits; a victim process is
// made to take the opener's PID (ns_last_pid, as CRIU does), opens a file of its own and
// listens on it. The attacker then writes MIGRATE_ID on the opener's old file, naming the
// victim's descriptor and every id handle in turn. Every one must be refused, the
// victim's listener must still be the victim's, and a migration between two files of the
// attacker's own must still work.
//
//   cm_migrate_attack BIND_IPV4    (as root, under `softhca exec`, nothing else forking)
// Exit 0 when the attack failed; 3 when an id was taken; 1 on any other failure.
#include "fork_with_pid.hpp"
#include "raw_migrate_id.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <rdma/rdma_cma.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

[[noreturn]] void die(const char* what) {
    std::fprintf(stderr, "cm_migrate_attack: %s: %s\n", what, std::strerror(errno));
    std::exit(1);
}

void send_int(int fd, int value) {
    if (write(fd, &value, sizeof(value)) != sizeof(value))
        die("pipe write");
}

int receive_int(int fd) {
    int value = 0;
    if (read(fd, &value, sizeof(value)) != sizeof(value))
        die("pipe read");
    return value;
}

// An id on `channel` and a command answered by the engine, so that the engine has taken
// the file (and pinned its process) before the caller goes on.
rdma_cm_id* make_id(rdma_event_channel* channel) {
    rdma_cm_id* id = nullptr;
    if (rdma_create_id(channel, &id, nullptr, RDMA_PS_TCP) != 0)
        die("rdma_create_id");
    return id;
}

// The attacker: holds the opener's file; tries every id handle of the victim's file.
int attack(rdma_event_channel* old_file, int from_victim, int to_victim) {
    const int victim_fd = receive_int(from_victim);
    int taken = 0;
    for (uint32_t id = 0; id < 65536; ++id)
        if (raw_cm::migrate_id(old_file->fd, id, victim_fd)) {
            std::printf("attacker: MIGRATE_ID took id %u of the victim's file\n", id);
            ++taken;
            break;
        }
    send_int(to_victim, 1);
    // A migration between two files of this process's own is still allowed.
    rdma_event_channel* first = rdma_create_event_channel();
    rdma_event_channel* second = rdma_create_event_channel();
    if (!first || !second)
        die("rdma_create_event_channel");
    rdma_cm_id* id = make_id(first);
    if (rdma_migrate_id(id, second) != 0)
        die("rdma_migrate_id between the attacker's own files");
    if (rdma_destroy_id(id) != 0)
        die("rdma_destroy_id after migrating");
    std::printf("attacker: own migration works; %s\n",
                taken ? "ATTACK SUCCEEDED" : "every MIGRATE_ID of the victim's id refused");
    return taken ? 3 : 0;
}

// The victim: listens on a file of its own, and afterwards its id must still be there.
int victim(const char* ip, int to_attacker, int from_attacker) {
    rdma_event_channel* channel = rdma_create_event_channel();
    if (!channel)
        die("victim: rdma_create_event_channel");
    rdma_cm_id* listener = make_id(channel);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(7471);
    inet_pton(AF_INET, ip, &address.sin_addr);
    if (rdma_bind_addr(listener, reinterpret_cast<sockaddr*>(&address)) != 0)
        die("victim: rdma_bind_addr");
    if (rdma_listen(listener, 1) != 0)
        die("victim: rdma_listen");
    send_int(to_attacker, channel->fd);
    receive_int(from_attacker);
    // DESTROY_ID goes to the victim's own file: an id moved away is not found there.
    if (rdma_destroy_id(listener) != 0) {
        std::printf("victim: its listener is gone from its file (%s)\n", std::strerror(errno));
        return 3;
    }
    std::printf("victim: its listener is still its own\n");
    return 0;
}

int exit_status(pid_t pid) {
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return 1;
    return WEXITSTATUS(status);
}

} // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: cm_migrate_attack BIND_IPV4\n");
        return 1;
    }
    int victim_to_attacker[2];
    int attacker_to_victim[2];
    if (pipe(victim_to_attacker) != 0 || pipe(attacker_to_victim) != 0)
        die("pipe");
    int verdict[2]; // the attacker's exit status (it is the opener's child, not ours)
    if (pipe(verdict) != 0)
        die("pipe");
    const pid_t opener = fork();
    if (opener < 0)
        die("fork");
    if (opener == 0) {
        rdma_event_channel* file = rdma_create_event_channel();
        if (!file)
            die("opener: rdma_create_event_channel");
        rdma_destroy_id(make_id(file)); // the engine has the file, pinned to this process
        const pid_t attacker = fork();
        if (attacker < 0)
            die("fork attacker");
        if (attacker == 0) {
            // Only its own ends: a victim that never comes is then an end of file.
            close(victim_to_attacker[1]);
            close(attacker_to_victim[0]);
            close(verdict[0]);
            const int status = attack(file, victim_to_attacker[0], attacker_to_victim[1]);
            send_int(verdict[1], status);
            std::exit(status);
        }
        std::_Exit(0); // leaves its PID; the attacker keeps the file
    }
    if (exit_status(opener) != 0)
        die("the opener failed");
    const pid_t taken = softhca::test::fork_with_pid(opener);
    if (taken < 0)
        die("fork victim with the opener's PID");
    if (taken == 0)
        std::exit(victim(argv[1], victim_to_attacker[1], attacker_to_victim[0]));
    if (taken != opener) {
        // Another process forked in between: the attack did not happen as meant.
        std::fprintf(stderr, "cm_migrate_attack: the victim got PID %d, not the opener's %d\n",
                     static_cast<int>(taken), static_cast<int>(opener));
        kill(taken, SIGKILL);
        return 1;
    }
    std::printf("victim has the opener's PID %d\n", static_cast<int>(taken));
    close(verdict[1]);
    const int attacker_status = receive_int(verdict[0]);
    const int victim_status = exit_status(taken);
    if (attacker_status == 3 || victim_status == 3) {
        std::printf("cm_migrate_attack: ATTACK SUCCEEDED\n");
        return 3;
    }
    if (attacker_status != 0 || victim_status != 0)
        return 1;
    std::printf("cm_migrate_attack: attack failed: PASS\n");
    return 0;
}
