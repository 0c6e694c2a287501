"""WebRTC calls: the SDP offer endpoint, a call as a client socket, its audio."""
