/*
 * librdmacm's RDMACM_1.4 and RDMACM_1.5 calls (rdma-core 65) through the C
 * ABI: rdma_write_cm_event (a USER event read back with its status and
 * argument), rdma_resolve_addrinfo / rdma_query_addrinfo (the
 * ADDRINFO_RESOLVED event and the answer; ENOENT, EBUSY, EINVAL and the IB
 * SA path's errors on RoCE), and repoll_create / repoll_ctl / repoll_wait
 * over two connected rsockets and a pipe: readable only once data was sent,
 * level-triggered, MOD and DEL, timeouts, a sleeping waiter woken by data,
 * by repoll_ctl and by rclose.
 *
 * The installed headers are rdma-core 44's: the new calls and values are
 * declared here as rdma-core 65's <rdma/rdma_cma.h> and <rdma/rsocket.h>
 * have them.
 */
#include "common.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>
#include <sys/epoll.h>

/* rdma-core 65's enum rdma_cm_event_type goes on after TIMEWAIT_EXIT (15). */
#define EV_ADDRINFO_RESOLVED ((enum rdma_cm_event_type)16)
#define EV_ADDRINFO_ERROR ((enum rdma_cm_event_type)17)
#define EV_USER ((enum rdma_cm_event_type)18)
#define RAI_SA 0x00000010
#define RAI_DNS 0x00000020

int rdma_resolve_addrinfo(struct rdma_cm_id *id, const char *node, const char *service,
			  const struct rdma_addrinfo *hints);
int rdma_query_addrinfo(struct rdma_cm_id *id, struct rdma_addrinfo **info);
int rdma_write_cm_event(struct rdma_cm_id *id, enum rdma_cm_event_type event, int status, uint64_t arg);
int repoll_create(int flags);
int repoll_ctl(int epfd, int op, int fd, struct epoll_event *event);
int repoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout);

/* rdma-core 65's param.arg: the first 8 bytes of the param union. */
static uint64_t event_arg(const struct rdma_cm_event *e)
{
	uint64_t arg;

	memcpy(&arg, &e->param, sizeof arg);
	return arg;
}

/* The next event of `ch`, waiting up to `ms` (NULL: none came). */
static struct rdma_cm_event *next_event(struct rdma_event_channel *ch, int ms)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *e = NULL;

	if (poll(&p, 1, ms) != 1 || rdma_get_cm_event(ch, &e))
		return NULL;
	return e;
}

/* Whether no event waits on `ch` now. */
static int no_event(struct rdma_event_channel *ch)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };

	return poll(&p, 1, 0) == 0;
}

static void write_cm_event(struct rdma_event_channel *ch)
{
	struct rdma_cm_id *id;
	struct rdma_cm_event *e;

	REQUIRE(rdma_create_id(ch, &id, (void *)0x1234, RDMA_PS_TCP) == 0, "rdma_create_id: %s", strerror(errno));

	begin("user_event_comes_back_with_status_and_arg");
	EXPECT(no_event(ch), "the channel starts empty");
	EXPECT(rdma_write_cm_event(id, EV_USER, -5, 0x1122334455667788ULL) == 0, "rdma_write_cm_event: %s",
	       strerror(errno));
	EXPECT(rdma_write_cm_event(id, EV_USER, 7, 42) == 0, "the second: %s", strerror(errno));
	e = next_event(ch, 2000);
	EXPECT(e != NULL, "the channel's fd became readable and the event came");
	if (e) {
		EXPECT(e->event == EV_USER && e->status == -5 && e->id == id && e->listen_id == NULL,
		       "event %d status %d", e->event, e->status);
		EXPECT(event_arg(e) == 0x1122334455667788ULL, "arg %#llx", (unsigned long long)event_arg(e));
		EXPECT(e->id->context == (void *)0x1234, "the id's context");
		rdma_ack_cm_event(e);
	}
	e = next_event(ch, 2000);
	EXPECT(e && e->event == EV_USER && e->status == 7 && event_arg(e) == 42, "the second, in order");
	if (e)
		rdma_ack_cm_event(e);
	EXPECT(no_event(ch), "nothing more");
	EXPECT(strcmp(rdma_event_str(EV_USER), "UNKNOWN EVENT") == 0, "rdma_event_str(USER): %s (65's)",
	       rdma_event_str(EV_USER));
	EXPECT(strcmp(rdma_event_str(EV_ADDRINFO_RESOLVED), "RDMA_CM_EVENT_ADDRINFO_RESOLVED") == 0 &&
		       strcmp(rdma_event_str(EV_ADDRINFO_ERROR), "RDMA_CM_EVENT_ADDRINFO_ERROR") == 0,
	       "the ADDRINFO events' names");
	end();

	begin("only_user_events_are_written");
	errno = 0;
	EXPECT(rdma_write_cm_event(id, RDMA_CM_EVENT_ESTABLISHED, 0, 1) == -1 && errno == EINVAL,
	       "ESTABLISHED: errno %d", errno);
	errno = 0;
	EXPECT(rdma_write_cm_event(id, EV_ADDRINFO_RESOLVED, 0, 1) == -1 && errno == EINVAL,
	       "ADDRINFO_RESOLVED: errno %d", errno);
	errno = 0;
	EXPECT(rdma_write_cm_event(NULL, EV_USER, 0, 1) == -1 && errno == EINVAL, "a NULL id: errno %d", errno);
	EXPECT(no_event(ch), "nothing was queued");
	end();
	rdma_destroy_id(id);
}

/* Whether `ai` is AF_INET 127.0.0.1:port, RC over RDMA_PS_TCP. */
static int is_loopback_answer(const struct rdma_addrinfo *ai, unsigned short port)
{
	const struct sockaddr_in *sin = (const struct sockaddr_in *)ai->ai_dst_addr;

	return ai->ai_family == AF_INET && ai->ai_dst_len == sizeof *sin && sin && sin->sin_family == AF_INET &&
	       sin->sin_addr.s_addr == htonl(INADDR_LOOPBACK) && sin->sin_port == htons(port) &&
	       ai->ai_port_space == RDMA_PS_TCP && ai->ai_qp_type == IBV_QPT_RC;
}

static void resolve_addrinfo(struct rdma_event_channel *ch)
{
	unsigned short port = (unsigned short)(1024 + getpid() % 60000);
	struct rdma_addrinfo hints, *ai = NULL;
	struct rdma_cm_id *id, *sid;
	struct rdma_cm_event *e;
	char service[16];

	snprintf(service, sizeof service, "%u", port);
	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_INET;
	hints.ai_flags = RAI_NUMERICHOST;
	REQUIRE(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id: %s", strerror(errno));

	begin("resolve_addrinfo_event_then_query");
	errno = 0;
	EXPECT(rdma_query_addrinfo(id, &ai) == -1 && errno == ENOENT, "query before resolving: errno %d", errno);
	EXPECT(rdma_resolve_addrinfo(id, "127.0.0.1", service, &hints) == 0, "rdma_resolve_addrinfo: %s",
	       strerror(errno));
	errno = 0;
	EXPECT(rdma_resolve_addrinfo(id, "127.0.0.1", service, &hints) == -1 && errno == EBUSY,
	       "a second while the first waits: errno %d", errno);
	e = next_event(ch, 2000);
	EXPECT(e && e->event == EV_ADDRINFO_RESOLVED && e->status == 0 && e->id == id,
	       "ADDRINFO_RESOLVED (event %d status %d)", e ? (int)e->event : -1, e ? e->status : 0);
	if (e)
		rdma_ack_cm_event(e);
	EXPECT(no_event(ch), "one event (the EBUSY call made none)");
	EXPECT(rdma_query_addrinfo(id, &ai) == 0 && ai != NULL, "rdma_query_addrinfo: %s", strerror(errno));
	if (ai) {
		EXPECT(is_loopback_answer(ai, port), "ai_dst_addr is 127.0.0.1:%u", port);
		rdma_freeaddrinfo(ai);
	}
	ai = NULL;
	errno = 0;
	EXPECT(rdma_query_addrinfo(id, &ai) == -1 && errno == ENOENT && ai == NULL, "handed over once: errno %d",
	       errno);
	/* Queried: a new resolution may start; an answer never queried goes with the id. */
	EXPECT(rdma_resolve_addrinfo(id, "127.0.0.1", service, NULL) == 0, "again after the query: %s",
	       strerror(errno));
	e = next_event(ch, 2000);
	EXPECT(e && e->event == EV_ADDRINFO_RESOLVED, "its event");
	if (e)
		rdma_ack_cm_event(e);
	end();
	rdma_destroy_id(id);

	begin("resolve_addrinfo_errors");
	REQUIRE(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id: %s", strerror(errno));
	errno = 0;
	EXPECT(rdma_resolve_addrinfo(NULL, "127.0.0.1", service, NULL) == -1 && errno == EINVAL, "NULL id: errno %d",
	       errno);
	errno = 0;
	EXPECT(rdma_query_addrinfo(NULL, &ai) == -1 && errno == EINVAL, "query NULL id: errno %d", errno);
	errno = 0;
	EXPECT(rdma_query_addrinfo(id, NULL) == -1 && errno == EINVAL, "query NULL info: errno %d", errno);
	errno = 0;
	EXPECT(rdma_resolve_addrinfo(id, NULL, NULL, NULL) == -1 && errno == EINVAL, "nothing to resolve: errno %d",
	       errno);
	errno = 0;
	EXPECT(rdma_resolve_addrinfo(id, "not-an-address", service, &hints) == -1 && errno == EAI_NONAME,
	       "a name that does not resolve: errno %d (getaddrinfo's EAI_NONAME, as librdmacm)", errno);
	hints.ai_flags = RAI_SA | RAI_DNS;
	errno = 0;
	EXPECT(rdma_resolve_addrinfo(id, NULL, "1", &hints) == -1 && errno == ENOTSUP, "RAI_SA|RAI_DNS: errno %d",
	       errno);
	hints.ai_flags = RAI_SA;
	errno = 0;
	EXPECT(rdma_resolve_addrinfo(id, "127.0.0.1", "1", &hints) == -1 && errno == ENOTSUP,
	       "RAI_SA with a node: errno %d", errno);
	errno = 0;
	EXPECT(rdma_resolve_addrinfo(id, NULL, NULL, &hints) == -1 && errno == EINVAL, "RAI_SA without a service: errno %d",
	       errno);
	errno = 0;
	EXPECT(rdma_resolve_addrinfo(id, NULL, "1", &hints) == -1 && errno == EINVAL,
	       "RAI_SA on an unbound id: errno %d", errno);
	{
		struct sockaddr_in sin;

		memset(&sin, 0, sizeof sin);
		sin.sin_family = AF_INET;
		REQUIRE(inet_pton(AF_INET, getenv("SOFTROCE_C_ADDR"), &sin.sin_addr) == 1, "SOFTROCE_C_ADDR");
		EXPECT(rdma_bind_addr(id, (struct sockaddr *)&sin) == 0, "rdma_bind_addr: %s", strerror(errno));
		errno = 0;
		EXPECT(rdma_resolve_addrinfo(id, NULL, "1", &hints) == -1 && errno == EOPNOTSUPP,
		       "RAI_SA bound to a RoCE device (no IB SA): errno %d", errno);
	}
	EXPECT(no_event(ch), "no failed call queued an event");
	errno = 0;
	EXPECT(rdma_query_addrinfo(id, &ai) == -1 && errno == ENOENT, "nothing to query: errno %d", errno);
	hints.ai_flags = RAI_NUMERICHOST;
	EXPECT(rdma_resolve_addrinfo(id, "127.0.0.1", service, &hints) == 0, "failures leave no resolution busy: %s",
	       strerror(errno));
	e = next_event(ch, 2000);
	if (e)
		rdma_ack_cm_event(e);
	end();
	rdma_destroy_id(id);

	begin("sync_id_resolve_addrinfo_waits_for_its_event");
	REQUIRE(rdma_create_id(NULL, &sid, NULL, RDMA_PS_TCP) == 0, "rdma_create_id(NULL channel): %s", strerror(errno));
	EXPECT(rdma_resolve_addrinfo(sid, "127.0.0.1", service, &hints) == 0, "rdma_resolve_addrinfo: %s",
	       strerror(errno));
	EXPECT(sid->event && sid->event->event == EV_ADDRINFO_RESOLVED && sid->event->status == 0,
	       "id->event holds ADDRINFO_RESOLVED");
	ai = NULL;
	EXPECT(rdma_query_addrinfo(sid, &ai) == 0 && ai && is_loopback_answer(ai, port), "the answer");
	if (ai)
		rdma_freeaddrinfo(ai);
	end();
	rdma_destroy_id(sid);
}

static struct sockaddr_in lease_addr(unsigned short port)
{
	struct sockaddr_in sin;

	memset(&sin, 0, sizeof sin);
	sin.sin_family = AF_INET;
	sin.sin_port = htons(port);
	REQUIRE(inet_pton(AF_INET, getenv("SOFTROCE_C_ADDR"), &sin.sin_addr) == 1, "SOFTROCE_C_ADDR");
	return sin;
}

/* A thread in repoll_wait. */
struct waiter {
	int ep, timeout, n, err;
	struct epoll_event ev[4];
	long long took;
};

static void *wait_thread(void *arg)
{
	struct waiter *w = arg;
	long long t0 = now_ms();

	errno = 0;
	w->n = repoll_wait(w->ep, w->ev, 4, w->timeout);
	w->err = errno;
	w->took = now_ms() - t0;
	return NULL;
}

/* The epoll_event for `events` and data `data`. */
static struct epoll_event ev_of(uint32_t events, uint64_t data)
{
	struct epoll_event e;

	memset(&e, 0, sizeof e);
	e.events = events;
	e.data.u64 = data;
	return e;
}

/* Reads exactly n bytes from the blocking rsocket s. */
static int recv_n(int s, char *buf, size_t n)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r = rrecv(s, buf + got, n - got, 0);

		if (r <= 0)
			return -1;
		got += (size_t)r;
	}
	return 0;
}

static void repoll(void)
{
	struct sockaddr_in sin = lease_addr(0), name;
	socklen_t nlen = sizeof name;
	struct epoll_event evs[8], e;
	int l, c, s, ep, ep2, p[2];
	char buf[16];
	long long t0;

	l = rsocket(AF_INET, SOCK_STREAM, 0);
	REQUIRE(l >= 0 && rbind(l, (struct sockaddr *)&sin, sizeof sin) == 0 && rlisten(l, 4) == 0,
		"listen: %s", strerror(errno));
	REQUIRE(rgetsockname(l, (struct sockaddr *)&name, &nlen) == 0 && name.sin_port != 0, "rgetsockname: %s",
		strerror(errno));
	c = rsocket(AF_INET, SOCK_STREAM, 0);
	REQUIRE(c >= 0 && rconnect(c, (struct sockaddr *)&name, sizeof name) == 0, "rconnect: %s", strerror(errno));
	s = raccept(l, NULL, NULL);
	REQUIRE(s >= 0, "raccept: %s", strerror(errno));
	REQUIRE(pipe(p) == 0, "pipe");

	begin("repoll_create_and_argument_errors");
	ep = repoll_create(0);
	EXPECT(ep >= 0 && fcntl(ep, F_GETFD) == 0, "repoll_create(0): %d, an open descriptor", ep);
	ep2 = repoll_create(EPOLL_CLOEXEC);
	EXPECT(ep2 >= 0 && fcntl(ep2, F_GETFD) == FD_CLOEXEC, "repoll_create(EPOLL_CLOEXEC)");
	EXPECT(rclose(ep2) == 0, "rclose of an empty repoll: %s", strerror(errno));
	errno = 0;
	EXPECT(repoll_wait(ep2, evs, 8, 0) == -1 && errno == EINVAL, "a closed repoll: errno %d", errno);
	errno = 0;
	EXPECT(repoll_create(0x40) == -1 && errno == EINVAL, "unknown flags: errno %d", errno);
	e = ev_of(EPOLLIN, 1);
	errno = 0;
	EXPECT(repoll_ctl(ep, EPOLL_CTL_ADD, -1, &e) == -1 && errno == EBADF, "fd -1: errno %d", errno);
	errno = 0;
	EXPECT(repoll_ctl(ep, EPOLL_CTL_ADD, ep, &e) == -1 && errno == EINVAL, "itself: errno %d", errno);
	errno = 0;
	EXPECT(repoll_ctl(p[0], EPOLL_CTL_ADD, c, &e) == -1 && errno == EINVAL, "not a repoll: errno %d", errno);
	errno = 0;
	EXPECT(repoll_ctl(ep, 99, c, &e) == -1 && errno == EINVAL, "unknown op: errno %d", errno);
	errno = 0;
	EXPECT(repoll_ctl(ep, EPOLL_CTL_ADD, c, NULL) == -1 && errno == EFAULT, "NULL event: errno %d", errno);
	errno = 0;
	EXPECT(repoll_ctl(ep, EPOLL_CTL_DEL, c, NULL) == -1 && errno == ENOENT, "DEL of no entry: errno %d", errno);
	errno = 0;
	EXPECT(repoll_ctl(ep, EPOLL_CTL_MOD, c, &e) == -1 && errno == ENOENT, "MOD of no entry: errno %d", errno);
	errno = 0;
	EXPECT(repoll_ctl(ep, EPOLL_CTL_ADD, 999999, &e) == -1 && errno == EBADF, "a closed descriptor: errno %d",
	       errno);
	errno = 0;
	EXPECT(repoll_wait(ep, NULL, 8, 0) == -1 && errno == EINVAL, "NULL events: errno %d", errno);
	errno = 0;
	EXPECT(repoll_wait(ep, evs, 0, 0) == -1 && errno == EINVAL, "maxevents 0: errno %d", errno);
	errno = 0;
	EXPECT(repoll_wait(p[0], evs, 8, 0) == -1 && errno == EINVAL, "wait on a non-repoll: errno %d", errno);
	EXPECT(repoll_wait(ep, evs, 8, 0) == 0, "an empty repoll has nothing");
	end();

	begin("readable_only_after_data_was_sent");
	e = ev_of(EPOLLIN, 1);
	EXPECT(repoll_ctl(ep, EPOLL_CTL_ADD, c, &e) == 0, "ADD the client: %s", strerror(errno));
	e = ev_of(EPOLLIN, 2);
	EXPECT(repoll_ctl(ep, EPOLL_CTL_ADD, s, &e) == 0, "ADD the server side: %s", strerror(errno));
	e = ev_of(EPOLLIN, 3);
	EXPECT(repoll_ctl(ep, EPOLL_CTL_ADD, p[0], &e) == 0, "ADD a pipe: %s", strerror(errno));
	errno = 0;
	EXPECT(repoll_ctl(ep, EPOLL_CTL_ADD, c, &e) == -1 && errno == EEXIST, "ADD twice: errno %d", errno);
	EXPECT(repoll_wait(ep, evs, 8, 0) == 0, "nothing readable yet");
	t0 = now_ms();
	EXPECT(repoll_wait(ep, evs, 8, 150) == 0, "nothing within 150 ms");
	EXPECT(now_ms() - t0 >= 140, "the timeout was waited (%lld ms)", now_ms() - t0);
	EXPECT(rsend(c, "hello", 5, 0) == 5, "rsend: %s", strerror(errno));
	memset(evs, 0, sizeof evs);
	EXPECT(repoll_wait(ep, evs, 8, 5000) == 1 && evs[0].data.u64 == 2 && evs[0].events == EPOLLIN,
	       "the server side is readable (data %llu events %#x)", (unsigned long long)evs[0].data.u64,
	       evs[0].events);
	EXPECT(repoll_wait(ep, evs, 8, 0) == 1 && evs[0].data.u64 == 2, "level-triggered: still readable");
	EXPECT(recv_n(s, buf, 5) == 0 && memcmp(buf, "hello", 5) == 0, "the bytes");
	EXPECT(repoll_wait(ep, evs, 8, 0) == 0, "read: no longer readable");
	EXPECT(write(p[1], "x", 1) == 1, "write the pipe");
	EXPECT(repoll_wait(ep, evs, 8, 1000) == 1 && evs[0].data.u64 == 3 && evs[0].events == EPOLLIN,
	       "the pipe is readable (data %llu)", (unsigned long long)evs[0].data.u64);
	EXPECT(read(p[0], buf, 1) == 1, "drain the pipe");
	end();

	begin("a_sleeping_wait_wakes_for_data");
	{
		struct waiter w = { .ep = ep, .timeout = -1 };
		pthread_t t;

		REQUIRE(pthread_create(&t, NULL, wait_thread, &w) == 0, "pthread_create");
		sleep_ms(100);
		EXPECT(rsend(s, "ab", 2, 0) == 2, "rsend: %s", strerror(errno));
		pthread_join(t, NULL);
		EXPECT(w.n == 1 && w.ev[0].data.u64 == 1 && (w.ev[0].events & EPOLLIN) && w.took >= 90,
		       "woke with the client readable (n %d data %llu after %lld ms)", w.n,
		       (unsigned long long)w.ev[0].data.u64, w.took);
		EXPECT(recv_n(c, buf, 2) == 0, "the bytes");
	}
	end();

	begin("mod_del_and_maxevents");
	e = ev_of(EPOLLOUT, 11);
	EXPECT(repoll_ctl(ep, EPOLL_CTL_MOD, c, &e) == 0, "MOD to EPOLLOUT: %s", strerror(errno));
	EXPECT(repoll_wait(ep, evs, 8, 1000) == 1 && evs[0].data.u64 == 11 && evs[0].events == EPOLLOUT,
	       "the client is writable, with the new data");
	EXPECT(rsend(c, "z", 1, 0) == 1, "rsend");
	sleep_ms(50);
	memset(evs, 0, sizeof evs);
	EXPECT(repoll_wait(ep, evs, 8, 1000) == 2 && evs[0].data.u64 == 11 && evs[1].data.u64 == 2,
	       "both, in the order added");
	EXPECT(repoll_wait(ep, evs, 1, 1000) == 1 && evs[0].data.u64 == 11, "maxevents 1: one");
	EXPECT(repoll_ctl(ep, EPOLL_CTL_DEL, s, NULL) == 0, "DEL the server side: %s", strerror(errno));
	e = ev_of(EPOLLIN, 1);
	EXPECT(repoll_ctl(ep, EPOLL_CTL_MOD, c, &e) == 0, "MOD back to EPOLLIN");
	t0 = now_ms();
	EXPECT(repoll_wait(ep, evs, 8, 100) == 0, "the deleted socket, still readable, is not reported");
	EXPECT(now_ms() - t0 >= 90, "the timeout was waited (%lld ms)", now_ms() - t0);
	end();

	begin("repoll_ctl_wakes_a_sleeping_wait");
	{
		struct waiter w = { .ep = ep, .timeout = 10000 };
		pthread_t t;

		REQUIRE(pthread_create(&t, NULL, wait_thread, &w) == 0, "pthread_create");
		sleep_ms(100);
		e = ev_of(EPOLLIN, 22);
		EXPECT(repoll_ctl(ep, EPOLL_CTL_ADD, s, &e) == 0, "ADD the readable socket: %s", strerror(errno));
		pthread_join(t, NULL);
		EXPECT(w.n == 1 && w.ev[0].data.u64 == 22 && w.took < 5000,
		       "woke with it (n %d data %llu after %lld ms)", w.n, (unsigned long long)w.ev[0].data.u64,
		       w.took);
		EXPECT(recv_n(s, buf, 1) == 0 && buf[0] == 'z', "the byte");
	}
	end();

	begin("rclose_of_a_repoll");
	errno = 0;
	EXPECT(rclose(ep) == -1 && errno == EBUSY, "with entries: errno %d", errno);
	EXPECT(repoll_ctl(ep, EPOLL_CTL_DEL, c, NULL) == 0 && repoll_ctl(ep, EPOLL_CTL_DEL, s, NULL) == 0 &&
		       repoll_ctl(ep, EPOLL_CTL_DEL, p[0], NULL) == 0,
	       "DEL all");
	{
		struct waiter w = { .ep = ep, .timeout = -1 };
		pthread_t t;

		REQUIRE(pthread_create(&t, NULL, wait_thread, &w) == 0, "pthread_create");
		sleep_ms(100);
		EXPECT(rclose(ep) == 0, "rclose: %s", strerror(errno));
		pthread_join(t, NULL);
		EXPECT(w.n == 0, "the sleeping wait returned 0 (%d, errno %d)", w.n, w.err);
	}
	errno = 0;
	EXPECT(repoll_wait(ep, evs, 8, 0) == -1 && errno == EINVAL, "closed: errno %d", errno);
	end();

	close(p[0]);
	close(p[1]);
	rclose(c);
	rclose(s);
	rclose(l);
}

int main(void)
{
	struct rdma_event_channel *ch;

	watchdog(40);
	ch = rdma_create_event_channel();
	REQUIRE(ch != NULL, "rdma_create_event_channel: %s", strerror(errno));
	write_cm_event(ch);
	resolve_addrinfo(ch);
	rdma_destroy_event_channel(ch);
	repoll();
	return finish();
}
