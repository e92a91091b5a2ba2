// Whether an HTTP client is still there while its request waits for tokens.
// cpp-httplib hands a handler no socket, so the connection's socket is found
// among this process's open sockets by the peer's address and port; a peer
// that closed its end (FIN, reset) is gone, and its request can be dropped.
#pragma once

#include <string>

namespace spillway::infer {

// The socket connected to `address`:`port` (numeric, as cpp-httplib's
// Request::remote_addr/remote_port give them); -1 when none is.
int peer_socket(const std::string& address, int port);

// True when the peer of `socket` has closed its end or the socket failed.
// Data the peer sent and nobody read yet counts as alive.
bool peer_closed(int socket);

}  // namespace spillway::infer
