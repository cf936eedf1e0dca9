// A process of the engine's own that takes the sockets it lets go of. Closing a client's
// socket drops whatever messages are still queued on it, and the kernel runs the release
// of each descriptor those messages carry on the thread that dropped the last reference:
// a TCP socket lingering on unsent data makes that thread wait as long as its SO_LINGER
// says (up to INT_MAX seconds), and a client can queue one on its control connection
// before it goes (an empty message reads as its end), or on a connection the engine
// refuses. A socket has no flush, so the engine's own close of it returns at once when it
// is not the last reference: the engine first sends the socket to the sink (SCM_RIGHTS,
// non-blocking), whose threads then hold the last references and wait for whatever they
// release. The engine's descriptor table and threads never hold them; the sink, which
// serves nobody, holds them until they go.
//
// The sink is forked at the engine's start, before it has threads, and dies with it.
#pragma once

namespace softhca::engine {

// Forks the sink. Call once, while the engine is still one thread. Without a sink (never
// started, or gone), send_to_descriptor_sink fails and the caller closes otherwise.
void start_descriptor_sink();

// Hands the socket `fd` to the sink and closes the engine's descriptor of it: true.
// False (nothing done) when `fd` is not a socket, or the sink cannot take it now.
bool send_to_descriptor_sink(int fd);

} // namespace softhca::engine
