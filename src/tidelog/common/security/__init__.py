"""Transport security and identity, shared by every service and client: TLS credentials that follow
their files (`tls`), principals from certificates (`principal`), and the server-side interceptor that
authenticates each call (`authentication`)."""
