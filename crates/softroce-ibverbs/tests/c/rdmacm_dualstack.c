/*
 * Dual-stack rdma_cm servers (issue 31): an id listening on 0.0.0.0:P and
 * an AF_INET6 id with RDMA_OPTION_ID_AFONLY listening on [::]:P, as the
 * kernel allows; an IPv4 request reaches the IPv4 listener (which family
 * goes where is unit-tested in softroce's rdma_cm/registry.rs). Without
 * AFONLY the IPv6 id takes both families, so its listen beside the IPv4
 * one fails, and alone it takes IPv4 requests.
 */
#include "common.h"

#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>

static struct dev d;

/* The next event on `ch` within `ms`, or NULL. */
static struct rdma_cm_event *next_event(struct rdma_event_channel *ch, int ms)
{
	struct pollfd p = { ch->fd, POLLIN, 0 };
	struct rdma_cm_event *e;

	if (poll(&p, 1, ms) != 1 || rdma_get_cm_event(ch, &e))
		return NULL;
	return e;
}

/* Connects a new id of `ch` to `dst` and returns the listener whose
 * CONNECT_REQUEST it caused on `sch` (rejecting the request), or NULL. */
static struct rdma_cm_id *listener_reached(struct rdma_event_channel *ch, struct rdma_event_channel *sch,
					   struct sockaddr *dst)
{
	struct rdma_conn_param param = { .responder_resources = 1, .initiator_depth = 1, .retry_count = 7 };
	struct rdma_cm_id *id, *listener = NULL;
	struct rdma_cm_event *e;

	REQUIRE(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id: errno %d", errno);
	e = NULL;
	if (rdma_resolve_addr(id, NULL, dst, 2000)) {
		fprintf(stderr, "rdma_resolve_addr: errno %d\n", errno);
		goto out;
	}
	e = next_event(ch, 5000);
	if (!e || e->event != RDMA_CM_EVENT_ADDR_RESOLVED) {
		fprintf(stderr, "no ADDR_RESOLVED: %s\n", e ? rdma_event_str(e->event) : "nothing");
		goto out_ack;
	}
	rdma_ack_cm_event(e);
	e = NULL;
	if (rdma_resolve_route(id, 2000)) {
		fprintf(stderr, "rdma_resolve_route: errno %d\n", errno);
		goto out;
	}
	e = next_event(ch, 5000);
	if (!e || e->event != RDMA_CM_EVENT_ROUTE_RESOLVED) {
		fprintf(stderr, "no ROUTE_RESOLVED: %s\n", e ? rdma_event_str(e->event) : "nothing");
		goto out_ack;
	}
	rdma_ack_cm_event(e);
	e = NULL;
	param.qp_num = 0x123;
	if (rdma_connect(id, &param)) {
		fprintf(stderr, "rdma_connect: errno %d\n", errno);
		goto out;
	}
	e = next_event(sch, 5000);
	if (!e || e->event != RDMA_CM_EVENT_CONNECT_REQUEST)
		fprintf(stderr, "no CONNECT_REQUEST at the server: %s\n", e ? rdma_event_str(e->event) : "nothing");
	if (e && e->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
		listener = e->listen_id;
		rdma_reject(e->id, NULL, 0);
		rdma_destroy_id(e->id);
	}
out_ack:
	if (e)
		rdma_ack_cm_event(e);
out:
	rdma_destroy_id(id);
	return listener;
}

static struct rdma_cm_id *listen_on(struct rdma_event_channel *ch, struct sockaddr *a, int afonly)
{
	struct rdma_cm_id *id;

	REQUIRE(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id: errno %d", errno);
	if (afonly >= 0)
		REQUIRE(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &afonly, sizeof(afonly)) == 0,
			"rdma_set_option(AFONLY): errno %d", errno);
	REQUIRE(rdma_bind_addr(id, a) == 0, "rdma_bind_addr: errno %d", errno);
	if (rdma_listen(id, 4)) {
		rdma_destroy_id(id);
		return NULL;
	}
	return id;
}

int main(void)
{
	struct rdma_event_channel *sch, *cch;
	struct sockaddr_in any4 = { .sin_family = AF_INET }, dst4 = { .sin_family = AF_INET };
	struct sockaddr_in6 any6 = { .sin6_family = AF_INET6 };
	struct rdma_cm_id *l4, *l6, *l6b;
	uint16_t port;

	watchdog(60);
	open_dev(&d);
	sch = rdma_create_event_channel();
	cch = rdma_create_event_channel();
	REQUIRE(sch && cch, "rdma_create_event_channel: errno %d", errno);

	begin("afonly_ipv6_listener_beside_an_ipv4_one");
	l4 = listen_on(sch, (struct sockaddr *)&any4, -1);
	REQUIRE(l4 != NULL, "listen on 0.0.0.0: errno %d", errno);
	port = rdma_get_src_port(l4);
	any6.sin6_port = port;
	l6 = listen_on(sch, (struct sockaddr *)&any6, 1);
	EXPECT(l6 != NULL, "listen on [::]:%u with AFONLY: errno %d", ntohs(port), errno);
	end();

	begin("ipv4_request_reaches_the_ipv4_listener");
	memcpy(&dst4.sin_addr, &d.gid.raw[12], 4);
	dst4.sin_port = port;
	EXPECT(listener_reached(cch, sch, (struct sockaddr *)&dst4) == l4, "IPv4 request not at the IPv4 listener");
	end();

	begin("ipv6_listener_without_afonly_takes_both_families");
	if (l6)
		rdma_destroy_id(l6);
	l6b = listen_on(sch, (struct sockaddr *)&any6, 0);
	EXPECT(l6b == NULL, "listen on [::]:%u without AFONLY beside 0.0.0.0 succeeded", ntohs(port));
	rdma_destroy_id(l4);
	l6b = listen_on(sch, (struct sockaddr *)&any6, 0);
	EXPECT(l6b != NULL, "listen on [::]:%u alone: errno %d", ntohs(port), errno);
	if (l6b) {
		EXPECT(listener_reached(cch, sch, (struct sockaddr *)&dst4) == l6b,
		       "IPv4 request not at the dual-stack listener");
		rdma_destroy_id(l6b);
	}
	end();

	rdma_destroy_event_channel(cch);
	rdma_destroy_event_channel(sch);
	ibv_dealloc_pd(d.pd);
	ibv_close_device(d.ctx);
	return finish();
}
