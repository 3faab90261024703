/*
 * A connected rdma_cm peer killed with SIGKILL (issue 31): with the
 * kernel's CM, the dead process's connections are ended by the kernel
 * (a DREQ), so the survivor gets RDMA_CM_EVENT_DISCONNECTED at once.
 * softroce's CM watches its peers on this host's shared device and does
 * the same within a second. Both directions: the server killed (the
 * client sees it), then the client killed (the server sees it).
 *
 * The two ends are two processes (fork before any verbs call), each
 * joining the shared device at SOFTROCE_C_ADDR.
 */
#include "common.h"

#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

static struct sockaddr_in addr_of(uint16_t port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = port };
	const char *s = getenv("SOFTROCE_C_ADDR");

	REQUIRE(s && inet_pton(AF_INET, s, &a.sin_addr) == 1, "SOFTROCE_C_ADDR %s", s ? s : "(unset)");
	return a;
}

/* The next event of `ch` within `ms` (its type in *ev), or -1. */
static int next_event(struct rdma_event_channel *ch, int ms, struct rdma_cm_event **ev)
{
	struct pollfd p = { ch->fd, POLLIN, 0 };

	if (poll(&p, 1, ms) != 1 || rdma_get_cm_event(ch, ev))
		return -1;
	return (int)(*ev)->event;
}

static void cm_qp(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr a = { .qp_type = IBV_QPT_RC };

	a.cap.max_send_wr = a.cap.max_recv_wr = 4;
	a.cap.max_send_sge = a.cap.max_recv_sge = 1;
	REQUIRE(rdma_create_qp(id, NULL, &a) == 0, "rdma_create_qp: errno %d", errno);
}

/* A listener of `ch` on SOFTROCE_C_ADDR and a port of its own. */
static struct rdma_cm_id *listener(struct rdma_event_channel *ch)
{
	struct sockaddr_in a = addr_of(0);
	struct rdma_cm_id *l;

	REQUIRE(ch && rdma_create_id(ch, &l, NULL, RDMA_PS_TCP) == 0, "rdma_create_id: errno %d", errno);
	REQUIRE(rdma_bind_addr(l, (struct sockaddr *)&a) == 0 && rdma_listen(l, 1) == 0, "listen: errno %d", errno);
	return l;
}

/* Accepts the next connection request on `ch`; returns its id once established. */
static struct rdma_cm_id *accept_one(struct rdma_event_channel *ch)
{
	struct rdma_conn_param param = { .responder_resources = 1, .initiator_depth = 1 };
	struct rdma_cm_id *id;
	struct rdma_cm_event *e;

	REQUIRE(next_event(ch, 10000, &e) == RDMA_CM_EVENT_CONNECT_REQUEST, "no CONNECT_REQUEST");
	id = e->id;
	rdma_ack_cm_event(e);
	cm_qp(id);
	REQUIRE(rdma_accept(id, &param) == 0, "rdma_accept: errno %d", errno);
	REQUIRE(next_event(ch, 10000, &e) == RDMA_CM_EVENT_ESTABLISHED, "server: no ESTABLISHED");
	rdma_ack_cm_event(e);
	return id;
}

/* Serves one connection: writes its port, then 'E' once established, to
 * `out`; then waits to be killed. */
static void server(int out)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *l = listener(ch);
	uint16_t port = rdma_get_src_port(l);
	char c = 'E';

	REQUIRE(write(out, &port, sizeof(port)) == sizeof(port), "write");
	accept_one(ch);
	REQUIRE(write(out, &c, 1) == 1, "write");
	for (;;)
		pause();
}

/* Connects to `port` and returns the id once established. */
static struct rdma_cm_id *client(struct rdma_event_channel *ch, uint16_t port)
{
	struct rdma_conn_param param = { .responder_resources = 1, .initiator_depth = 1, .retry_count = 7 };
	struct sockaddr_in dst = addr_of(port);
	struct rdma_cm_id *id;
	struct rdma_cm_event *e;

	REQUIRE(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id: errno %d", errno);
	REQUIRE(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0, "rdma_resolve_addr: errno %d", errno);
	REQUIRE(next_event(ch, 5000, &e) == RDMA_CM_EVENT_ADDR_RESOLVED, "no ADDR_RESOLVED");
	rdma_ack_cm_event(e);
	REQUIRE(rdma_resolve_route(id, 2000) == 0, "rdma_resolve_route: errno %d", errno);
	REQUIRE(next_event(ch, 5000, &e) == RDMA_CM_EVENT_ROUTE_RESOLVED, "no ROUTE_RESOLVED");
	rdma_ack_cm_event(e);
	cm_qp(id);
	REQUIRE(rdma_connect(id, &param) == 0, "rdma_connect: errno %d", errno);
	REQUIRE(next_event(ch, 10000, &e) == RDMA_CM_EVENT_ESTABLISHED, "client: no ESTABLISHED");
	rdma_ack_cm_event(e);
	return id;
}

static double mono_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* Waits up to 5 s for DISCONNECTED on `ch`; returns the ms it took or -1. */
static double disconnected_after(struct rdma_event_channel *ch, double since)
{
	struct rdma_cm_event *e;
	int ev = next_event(ch, 5000, &e);

	if (ev < 0)
		return -1;
	rdma_ack_cm_event(e);
	if (ev != RDMA_CM_EVENT_DISCONNECTED) {
		fprintf(stderr, "event %s instead of DISCONNECTED\n", rdma_event_str(ev));
		return -1;
	}
	return mono_ms() - since;
}

/* Kills `pid` once it says 'E' (established) on `from`, and checks that
 * `id`'s side gets DISCONNECTED within a second; then tears `id` down. */
static void kill_and_expect_disconnect(const char *who, pid_t pid, int from, struct rdma_event_channel *ch,
				       struct rdma_cm_id *id)
{
	double ms;
	char c;

	REQUIRE(read(from, &c, 1) == 1 && c == 'E', "the %s did not see ESTABLISHED", who);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	ms = disconnected_after(ch, mono_ms());
	EXPECT(ms >= 0 && ms <= 1000, "DISCONNECTED after %.0f ms (-1: none within 5 s)", ms);
	printf("%s killed: DISCONNECTED after %.0f ms\n", who, ms);
	rdma_disconnect(id);
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
}

int main(void)
{
	int p[2];
	pid_t pid;
	uint16_t port;
	char c;

	watchdog(60);

	begin("server_killed_client_disconnected_within_1s");
	REQUIRE(pipe(p) == 0, "pipe");
	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (pid == 0) {
		close(p[0]);
		server(p[1]);
	}
	close(p[1]);
	REQUIRE(read(p[0], &port, sizeof(port)) == sizeof(port), "the server's port");
	{
		struct rdma_event_channel *ch = rdma_create_event_channel();
		struct rdma_cm_id *id;

		REQUIRE(ch, "rdma_create_event_channel");
		id = client(ch, port);
		kill_and_expect_disconnect("server", pid, p[0], ch, id);
		rdma_destroy_event_channel(ch);
	}
	close(p[0]);
	end();

	begin("client_killed_server_disconnected_within_1s");
	{
		int q[2];
		struct rdma_event_channel *ch = rdma_create_event_channel();
		struct rdma_cm_id *l, *id;

		REQUIRE(pipe(q) == 0, "pipe");
		l = listener(ch);
		port = rdma_get_src_port(l);
		/* The client: a process of its own, which joins the device after
		 * the fork; killed once established. */
		pid = fork();
		REQUIRE(pid >= 0, "fork");
		if (pid == 0) {
			struct rdma_event_channel *cch = rdma_create_event_channel();

			REQUIRE(cch, "rdma_create_event_channel");
			client(cch, port);
			c = 'E';
			REQUIRE(write(q[1], &c, 1) == 1, "write");
			for (;;)
				pause();
		}
		id = accept_one(ch);
		kill_and_expect_disconnect("client", pid, q[0], ch, id);
		rdma_destroy_id(l);
		rdma_destroy_event_channel(ch);
	}
	end();
	return finish();
}
