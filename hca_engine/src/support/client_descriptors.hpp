// Descriptors that a client hands the engine (its async event pipe, its rdma_cm event
// pipe). A file description is shared by every descriptor of it, so a client that
// keeps a duplicate could clear O_NONBLOCK on it, fill the pipe and leave the engine's
// one thread blocked in write(), or make it something else than a pipe. The engine
// therefore never writes through the client's description: it checks that the
// descriptor is an anonymous pipe (not a FIFO on disk, nor any other file that a root
// open could widen) and opens the pipe anew through /proc/self/fd, a description of
// its own, non-blocking, that no client holds.
#pragma once

namespace softhca::engine {

// Takes `fd` (closing it) and returns the engine's own non-blocking descriptor of the
// same pipe, opened for writing (or for reading and writing with `read_too`); -1 when
// `fd` is not an anonymous pipe or cannot be opened again.
int adopt_client_pipe(int fd, bool read_too = false);

} // namespace softhca::engine
