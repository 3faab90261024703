/*
 * rsockets (librdmacm's socket API) through the C ABI: a fork()ed server
 * and its parent, the client, on the leased loopback address. Blocking and
 * vectored transfers checked byte for byte, MSG_PEEK and MSG_WAITALL, a
 * reader blocked in one thread while another sends on the socket, a
 * nonblocking exchange with rpoll over an rsocket and a pipe together,
 * rselect, riomap/riowrite, shutdown of one direction and of both, and the
 * error paths (EBADF, ENOTSOCK, ENOTCONN, ECONNREFUSED, EFAULT, SOCK_DGRAM).
 * The server reports by its exit status (0: all it checked was right).
 */
#include "common.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rsocket.h>
#include <sys/select.h>
#include <sys/uio.h>
#include <sys/wait.h>

#define BIG 200000
#define SMALL 1000
#define MAP 4096

static struct sockaddr_in addr_at(unsigned short port)
{
	struct sockaddr_in sin;

	memset(&sin, 0, sizeof sin);
	sin.sin_family = AF_INET;
	sin.sin_port = htons(port);
	REQUIRE(inet_pton(AF_INET, getenv("SOFTROCE_C_ADDR"), &sin.sin_addr) == 1, "SOFTROCE_C_ADDR");
	return sin;
}

static void pattern(uint8_t *b, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)(i * 7 + seed + i / 251);
}

/* Receives exactly n bytes (blocking socket); 0 on success. */
static int recv_all(int s, void *buf, size_t n)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r = rrecv(s, (char *)buf + got, n - got, 0);

		if (r <= 0)
			return -1;
		got += (size_t)r;
	}
	return 0;
}

/* Sends exactly n bytes, waiting with rpoll when the socket would block. */
static int send_all(int s, const void *buf, size_t n)
{
	size_t sent = 0;

	while (sent < n) {
		ssize_t r = rsend(s, (const char *)buf + sent, n - sent, 0);

		if (r > 0) {
			sent += (size_t)r;
		} else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			struct pollfd p = { .fd = s, .events = POLLOUT };

			if (rpoll(&p, 1, 5000) != 1)
				return -1;
		} else {
			return -1;
		}
	}
	return 0;
}

/* A thread that waits in rrecv for one byte. */
struct reader {
	int s;
	char c;
	ssize_t n;
};

static void *blocked_reader(void *arg)
{
	struct reader *r = arg;

	r->n = rrecv(r->s, &r->c, 1, MSG_WAITALL);
	return NULL;
}

/* The server: accepts one connection and serves the client's phases. */
static int server(int ready_fd, unsigned short port)
{
	static uint8_t big[BIG], map[MAP];
	struct sockaddr_in sin = addr_at(port);
	struct sockaddr_in peer;
	socklen_t plen = sizeof peer;
	uint8_t small[SMALL];
	char c;
	int l, s, fails = 0;

	l = rsocket(AF_INET, SOCK_STREAM, 0);
	if (l < 0 || rbind(l, (struct sockaddr *)&sin, sizeof sin) || rlisten(l, 4)) {
		fprintf(stderr, "server: listen: %s\n", strerror(errno));
		return 10;
	}
	if (write(ready_fd, "L", 1) != 1)
		return 11;
	s = raccept(l, (struct sockaddr *)&peer, &plen);
	if (s < 0) {
		fprintf(stderr, "server: raccept: %s\n", strerror(errno));
		return 12;
	}
	if (plen != sizeof peer || peer.sin_family != AF_INET || peer.sin_addr.s_addr != sin.sin_addr.s_addr)
		fails |= 1;
	/* 1. Echo BIG bytes. */
	if (recv_all(s, big, BIG) || rsend(s, big, BIG, 0) != BIG)
		fails |= 2;
	/* 2. Answer a "ping" the client sends while another of its threads
	 * waits in rrecv on the same socket. */
	{
		char ping[4];

		if (recv_all(s, ping, 4) || memcmp(ping, "ping", 4) || rsend(s, "T", 1, 0) != 1)
			fails |= 4096;
	}
	/* 3. Nonblocking: wait with rpoll, echo SMALL bytes. */
	if (rfcntl(s, F_SETFL, O_NONBLOCK) || !(rfcntl(s, F_GETFL) & O_NONBLOCK))
		fails |= 4;
	{
		size_t got = 0;

		while (got < SMALL) {
			struct pollfd p = { .fd = s, .events = POLLIN };
			ssize_t r;

			if (rpoll(&p, 1, 5000) != 1 || !(p.revents & POLLIN)) {
				fails |= 8;
				break;
			}
			r = rrecv(s, small + got, SMALL - got, 0);
			if (r > 0)
				got += (size_t)r;
			else if (!(r < 0 && errno == EAGAIN))
				break;
		}
		if (got != SMALL || send_all(s, small, SMALL))
			fails |= 16;
	}
	rfcntl(s, F_SETFL, 0);
	/* 4. riomap: the mapping travels ahead of the "M" that follows it. */
	memset(map, 0, MAP);
	if (riomap(s, map, MAP, PROT_WRITE, 0, 0) != 0)
		fails |= 32;
	if (rsend(s, "M", 1, 0) != 1 || rrecv(s, &c, 1, MSG_WAITALL) != 1 || c != 'W')
		fails |= 64;
	{
		uint8_t want[MAP];

		pattern(want, MAP, 3);
		c = memcmp(map, want, MAP) == 0 ? 'K' : 'X';
	}
	if (rsend(s, &c, 1, 0) != 1)
		fails |= 128;
	if (riounmap(s, map, MAP) != 0)
		fails |= 256;
	/* 5. The client shuts down writing: the stream ends, our side still sends. */
	if (rrecv(s, &c, 1, 0) != 0)
		fails |= 512;
	if (rsend(s, "E", 1, 0) != 1)
		fails |= 1024;
	if (rclose(s) || rclose(l))
		fails |= 2048;
	if (fails)
		fprintf(stderr, "server: failed steps %#x\n", fails);
	return fails ? 1 : 0;
}

int main(void)
{
	static uint8_t out[BIG], in[BIG];
	unsigned short port = (unsigned short)(20000 + getpid() % 20000);
	struct sockaddr_in sin = addr_at(port), other = addr_at((unsigned short)(port + 1));
	struct sockaddr_in name;
	socklen_t nlen;
	int ready[2], s, status = -1;
	pid_t pid;
	char c;

	watchdog(40);
	REQUIRE(pipe(ready) == 0, "pipe");
	fflush(stdout);
	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (pid == 0) {
		alarm(35);
		close(ready[0]);
		_exit(server(ready[1], port));
	}
	close(ready[1]);

	begin("bad_numbers_are_ebadf_or_enotsock");
	errno = 0;
	EXPECT(rsend(-1, "x", 1, 0) == -1 && errno == EBADF, "rsend(-1): errno %d", errno);
	errno = 0;
	EXPECT(rrecv(ready[0], &c, 1, 0) == -1 && errno == ENOTSOCK, "rrecv(pipe): errno %d", errno);
	errno = 0;
	EXPECT(rclose(123456) == -1 && errno == EBADF, "rclose(123456): errno %d", errno);
	end();

	begin("datagram_rsockets_are_refused");
	errno = 0;
	EXPECT(rsocket(AF_INET, SOCK_DGRAM, 0) == -1 && errno == EPROTONOSUPPORT, "SOCK_DGRAM: errno %d", errno);
	errno = 0;
	EXPECT(rsocket(AF_UNIX, SOCK_STREAM, 0) == -1 && errno == EAFNOSUPPORT, "AF_UNIX: errno %d", errno);
	end();

	begin("unconnected_calls_fail");
	s = rsocket(AF_INET, SOCK_STREAM, 0);
	REQUIRE(s >= 0, "rsocket: %s", strerror(errno));
	EXPECT(fcntl(s, F_GETFD) >= 0, "the rsocket number is an open descriptor of the process");
	errno = 0;
	EXPECT(rrecv(s, &c, 1, 0) == -1 && errno == ENOTCONN, "rrecv: errno %d", errno);
	errno = 0;
	EXPECT(rshutdown(s, SHUT_RDWR) == -1 && errno == ENOTCONN, "rshutdown: errno %d", errno);
	errno = 0;
	EXPECT(rbind(s, NULL, sizeof sin) == -1 && errno == EFAULT, "rbind(NULL): errno %d", errno);
	errno = 0;
	EXPECT(rsend(s, NULL, 10, 0) == -1 && (errno == EFAULT || errno == ENOTCONN), "rsend(NULL): errno %d", errno);
	errno = 0;
	EXPECT(raccept(s, NULL, NULL) == -1 && errno == EINVAL, "raccept on a non-listener: errno %d", errno);
	end();

	begin("connect_to_an_unlistened_port_is_refused");
	errno = 0;
	EXPECT(rconnect(s, (struct sockaddr *)&other, sizeof other) == -1 && errno == ECONNREFUSED,
	       "rconnect: errno %d (%s)", errno, strerror(errno));
	EXPECT(rclose(s) == 0, "rclose: %s", strerror(errno));
	end();

	begin("connect");
	REQUIRE(read(ready[0], &c, 1) == 1 && c == 'L', "the server listens");
	s = rsocket(AF_INET, SOCK_STREAM, 0);
	REQUIRE(s >= 0, "rsocket: %s", strerror(errno));
	{
		/* The server's riomap goes into this side's iomap table: one entry. */
		int one = 1;

		REQUIRE(rsetsockopt(s, SOL_RDMA, RDMA_IOMAPSIZE, &one, sizeof one) == 0, "RDMA_IOMAPSIZE: %s", strerror(errno));
	}
	REQUIRE(rconnect(s, (struct sockaddr *)&sin, sizeof sin) == 0, "rconnect: %s", strerror(errno));
	nlen = sizeof name;
	EXPECT(rgetpeername(s, (struct sockaddr *)&name, &nlen) == 0 && nlen == sizeof name && name.sin_port == htons(port),
	       "rgetpeername: port %d", ntohs(name.sin_port));
	nlen = sizeof name;
	EXPECT(rgetsockname(s, (struct sockaddr *)&name, &nlen) == 0 && name.sin_family == AF_INET &&
		       name.sin_addr.s_addr == sin.sin_addr.s_addr,
	       "rgetsockname");
	{
		int v = 0;
		socklen_t vl = sizeof v;

		EXPECT(rgetsockopt(s, SOL_SOCKET, SO_ERROR, &v, &vl) == 0 && v == 0, "SO_ERROR %d", v);
		EXPECT(rgetsockopt(s, SOL_RDMA, RDMA_SQSIZE, &v, &vl) == 0 && v == 384, "RDMA_SQSIZE %d (rsockets' default 384)", v);
		EXPECT(rgetsockopt(s, SOL_RDMA, RDMA_INLINE, &v, &vl) == 0 && v == 64, "RDMA_INLINE %d (64)", v);
		v = 8;
		errno = 0;
		EXPECT(rsetsockopt(s, SOL_RDMA, RDMA_SQSIZE, &v, sizeof v) == -1 && errno == EINVAL,
		       "SOL_RDMA sizes are fixed once connected: errno %d", errno);
	}
	end();

	begin("blocking_and_vectored_transfer_is_exact");
	pattern(out, BIG, 1);
	{
		struct iovec iov[3] = { { out, 1000 }, { out + 1000, 99000 }, { out + 100000, 50000 } };

		EXPECT(rwritev(s, iov, 3) == 150000, "rwritev: %s", strerror(errno));
		EXPECT(rsend(s, out + 150000, BIG - 150000, 0) == BIG - 150000, "rsend: %s", strerror(errno));
	}
	memset(in, 0, BIG);
	{
		struct iovec iov[2] = { { in, 7 }, { in + 7, 50000 - 7 } };
		ssize_t r = rrecv(s, in, 10, MSG_PEEK);

		EXPECT(r > 0 && r <= 10 && memcmp(in, out, (size_t)r) == 0, "MSG_PEEK: %zd (%s)", r, strerror(errno));
		r = rreadv(s, iov, 2);
		EXPECT(r > 0 && r <= 50000, "rreadv: %zd (%s)", r, strerror(errno));
		if (r < 0)
			r = 0;
		EXPECT(rrecv(s, in + r, BIG - (size_t)r, MSG_WAITALL) == BIG - r, "MSG_WAITALL: %s", strerror(errno));
	}
	EXPECT(memcmp(in, out, BIG) == 0, "the echo differs");
	end();

	begin("a_reader_blocked_in_one_thread_lets_another_send");
	{
		pthread_t t;
		struct reader r = { .s = s, .c = 0, .n = 0 };

		REQUIRE(pthread_create(&t, NULL, blocked_reader, &r) == 0, "pthread_create");
		sleep_ms(100);
		EXPECT(rsend(s, "ping", 4, 0) == 4, "rsend while the other thread waits: %s", strerror(errno));
		pthread_join(t, NULL);
		EXPECT(r.n == 1 && r.c == 'T', "the waiting reader got the answer (%zd, '%c')", r.n, r.c);
	}
	end();

	begin("nonblocking_with_rpoll_and_rselect");
	EXPECT(rfcntl(s, F_SETFL, O_NONBLOCK) == 0, "rfcntl: %s", strerror(errno));
	errno = 0;
	EXPECT(rrecv(s, in, 1, 0) == -1 && (errno == EAGAIN || errno == EWOULDBLOCK), "nothing to read: errno %d", errno);
	pattern(out, SMALL, 2);
	EXPECT(send_all(s, out, SMALL) == 0, "send: %s", strerror(errno));
	{
		int p2[2];
		struct pollfd p[2];
		size_t got = 0;
		fd_set w;
		struct timeval tv = { 2, 0 };

		REQUIRE(pipe(p2) == 0 && write(p2[1], "x", 1) == 1, "a pipe");
		p[0] = (struct pollfd){ .fd = p2[0], .events = POLLIN };
		p[1] = (struct pollfd){ .fd = s, .events = POLLIN };
		EXPECT(rpoll(p, 2, 5000) >= 1 && (p[0].revents & POLLIN), "rpoll sees the ordinary pipe");
		p[0].fd = -1;
		while (got < SMALL) {
			ssize_t r;

			if (rpoll(p, 2, 5000) < 1 || !(p[1].revents & POLLIN))
				break;
			r = rrecv(s, in + got, SMALL - got, 0);
			if (r > 0)
				got += (size_t)r;
		}
		EXPECT(got == SMALL && memcmp(in, out, SMALL) == 0, "the nonblocking echo: %zu bytes", got);
		FD_ZERO(&w);
		FD_SET(s, &w);
		EXPECT(rselect(s + 1, NULL, &w, NULL, &tv) == 1 && FD_ISSET(s, &w), "rselect: writable");
		close(p2[0]);
		close(p2[1]);
	}
	EXPECT(rfcntl(s, F_SETFL, 0) == 0, "rfcntl: %s", strerror(errno));
	end();

	begin("riowrite_lands_in_the_peer_s_riomap");
	EXPECT(rrecv(s, &c, 1, MSG_WAITALL) == 1 && c == 'M', "the server mapped its buffer");
	pattern(out, MAP, 3);
	{
		size_t done = 0;

		while (done < MAP) {
			size_t r = riowrite(s, out + done, MAP - done, (off_t)done, 0);

			if (r == (size_t)-1 || r == 0)
				break;
			done += r;
		}
		EXPECT(done == MAP, "riowrite: %zu bytes (%s)", done, strerror(errno));
	}
	EXPECT(rsend(s, "W", 1, 0) == 1, "rsend");
	EXPECT(rrecv(s, &c, 1, MSG_WAITALL) == 1 && c == 'K', "the server found the bytes in its mapping ('%c')", c);
	end();

	begin("shutdown_ends_one_direction_then_both");
	EXPECT(rshutdown(s, SHUT_WR) == 0, "rshutdown(SHUT_WR): %s", strerror(errno));
	errno = 0;
	EXPECT(rsend(s, "x", 1, 0) == -1, "no sending after SHUT_WR");
	EXPECT(rrecv(s, &c, 1, MSG_WAITALL) == 1 && c == 'E', "the server still sends");
	EXPECT(rrecv(s, &c, 1, 0) == 0, "then the stream ends");
	EXPECT(rclose(s) == 0, "rclose: %s", strerror(errno));
	errno = 0;
	EXPECT(rsend(s, "x", 1, 0) == -1 && (errno == EBADF || errno == ENOTSOCK), "a closed rsocket: errno %d", errno);
	end();

	begin("server_side");
	EXPECT(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
	       "the server exited with %d", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	end();
	return finish();
}
