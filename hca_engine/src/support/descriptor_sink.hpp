// A process of the engine's own that takes the sockets it lets go of. Closing a client's
// socket drops whatever messages are still queued on it, and the kernel runs the release
// of each descriptor those messages carry on the thread that dropped the last reference:
// a TCP socket lingering on unsent data makes that thread wait as long as its SO_LINGER
// says (up to INT_MAX seconds), and a client can queue one on its control connection
// before it goes (an empty message reads as its end), or on a connection the engine
// refuses. A socket has no flush, so the engine's own close of it returns at once when it
// is not the last reference: the engine first sends the socket to the sink (SCM_RIGHTS,
// non-blocking), closes its descriptor, then tells the sink so. The sink holds each
// socket until it hears that (before, its own close could leave the engine's the last
// one), then closes it on the closing threads of the account the engine named, one lane
// per user as in the engine (client_descriptors.hpp), so that one user's sockets that
// wait hold no other user's. The engine's descriptor table and threads never hold them.
//
// The sink is forked at the engine's start, before it has threads, keeps no capability,
// and dies with the engine.
#pragma once

#include <sys/types.h>

namespace softhca::engine {

// Forks the sink. Call once, while the engine is still one thread. Without a sink (never
// started, or gone), send_to_descriptor_sink fails and the caller closes otherwise.
void start_descriptor_sink();

// Hands the socket `fd` to the sink, to be closed on `account`'s closing threads there,
// and closes the engine's descriptor of it: true. False (nothing done) when `fd` is not
// a socket, or the sink cannot take it now.
bool send_to_descriptor_sink(int fd, uid_t account);

} // namespace softhca::engine
