/*
 * librdmacm's device list, ECE and notify entry points, and a synchronous
 * id's first steps, through the C ABI (linked with -lrdmacm, which is the
 * same library as libibverbs here).
 */
#include "common.h"

#include <rdma/rdma_cma.h>

int main(void)
{
	struct ibv_context **list;
	struct rdma_cm_id *id;
	struct ibv_ece ece = { .vendor_id = 0x15b3, .options = 0, .comp_mask = 0 };
	struct sockaddr_in sin;
	int n = -1;

	watchdog(20);

	begin("get_devices");
	list = rdma_get_devices(&n);
	REQUIRE(list != NULL, "rdma_get_devices: %s", strerror(errno));
	EXPECT(n == 1, "%d devices (SOFTROCE_DEVICES names one)", n);
	EXPECT(list[0] != NULL && list[1] == NULL, "the list is one context, NULL-terminated");
	if (list[0])
		EXPECT(strcmp(ibv_get_device_name(list[0]->device), "softroce_lo") == 0, "device %s",
		       ibv_get_device_name(list[0]->device));
	rdma_free_devices(list);
	end();

	begin("sync_id_has_its_own_channel");
	REQUIRE(rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id(NULL channel): %s", strerror(errno));
	EXPECT(id->channel != NULL && id->channel->fd >= 0, "a synchronous id has a channel of its own");
	end();

	begin("sync_resolve_waits_for_its_event");
	memset(&sin, 0, sizeof sin);
	sin.sin_family = AF_INET;
	sin.sin_port = htons(7);
	REQUIRE(inet_pton(AF_INET, getenv("SOFTROCE_C_ADDR"), &sin.sin_addr) == 1, "SOFTROCE_C_ADDR");
	EXPECT(rdma_resolve_addr(id, NULL, (struct sockaddr *)&sin, 2000) == 0, "rdma_resolve_addr: %s", strerror(errno));
	EXPECT(id->event != NULL && id->event->event == RDMA_CM_EVENT_ADDR_RESOLVED, "id->event holds ADDR_RESOLVED");
	EXPECT(id->verbs != NULL, "the id has its device");
	EXPECT(rdma_resolve_route(id, 2000) == 0, "rdma_resolve_route: %s", strerror(errno));
	EXPECT(id->event != NULL && id->event->event == RDMA_CM_EVENT_ROUTE_RESOLVED, "id->event holds ROUTE_RESOLVED");
	end();

	begin("ece_set_and_get");
	EXPECT(rdma_set_local_ece(id, &ece) == 0, "rdma_set_local_ece: %s", strerror(errno));
	memset(&ece, 0xff, sizeof ece);
	EXPECT(rdma_get_remote_ece(id, &ece) == 0 && ece.vendor_id == 0 && ece.options == 0,
	       "no peer yet: remote ECE 0 (%#x)", ece.vendor_id);
	end();

	begin("notify_other_events_change_nothing");
	EXPECT(rdma_notify(id, IBV_EVENT_SQ_DRAINED) == 0, "rdma_notify(SQ_DRAINED): %s", strerror(errno));
	EXPECT(rdma_notify(id, IBV_EVENT_COMM_EST) == -1, "COMM_EST without a connection fails");
	end();

	begin("reject_ece_needs_a_request");
	EXPECT(rdma_reject_ece(id, NULL, 0) == -1, "rdma_reject_ece on an id that got no request");
	end();

	begin("qp_with_librdmacm_s_cqs_and_an_srq");
	{
		struct ibv_srq_init_attr sa = { .attr = { .max_wr = 8, .max_sge = 1 } };
		struct ibv_qp_init_attr qa = { .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
					       .qp_type = IBV_QPT_RC, .sq_sig_all = 1 };

		EXPECT(id->pd != NULL, "the id has a default PD");
		EXPECT(rdma_create_srq(id, NULL, &sa) == 0 && id->srq != NULL, "rdma_create_srq: %s", strerror(errno));
		EXPECT(rdma_create_qp(id, NULL, &qa) == 0, "rdma_create_qp without CQs: %s", strerror(errno));
		EXPECT(id->qp && id->send_cq && id->recv_cq && id->send_cq_channel && id->recv_cq_channel,
		       "librdmacm made the CQs and their channels");
		EXPECT(qa.send_cq == id->send_cq && qa.recv_cq == id->recv_cq, "and wrote them into the init attr");
		if (id->qp)
			EXPECT(id->qp->srq == id->srq && id->qp->recv_cq == id->recv_cq, "the QP uses them and the id's SRQ");
	}
	end();

	begin("multicast_rules");
	{
		struct rdma_cm_id *ud;
		struct ibv_qp_init_attr qa = { .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
					       .qp_type = IBV_QPT_UD };
		struct rdma_cm_join_mc_attr_ex mc = { 0 };
		struct sockaddr_in grp = { .sin_family = AF_INET };
		union ibv_gid mgid;
		int ctx_cookie = 7;

		REQUIRE(inet_pton(AF_INET, "239.123.4.5", &grp.sin_addr) == 1, "group");
		/* An RC QP joins no group; a TCP port space id cannot join. */
		memset(&mgid, 0, sizeof mgid);
		mgid.raw[10] = mgid.raw[11] = 0xff;
		memcpy(&mgid.raw[12], &grp.sin_addr, 4);
		if (id->qp)
			EXPECT(ibv_attach_mcast(id->qp, &mgid, 0) == EINVAL, "ibv_attach_mcast on an RC QP: EINVAL");
		errno = 0;
		EXPECT(rdma_join_multicast(id, (struct sockaddr *)&grp, NULL) == -1 && errno == EINVAL,
		       "an RDMA_PS_TCP id joins no group (errno %d)", errno);

		REQUIRE(rdma_create_id(NULL, &ud, NULL, RDMA_PS_UDP) == 0, "rdma_create_id(UDP): %s", strerror(errno));
		sin.sin_port = 0;
		REQUIRE(rdma_bind_addr(ud, (struct sockaddr *)&sin) == 0, "rdma_bind_addr: %s", strerror(errno));
		REQUIRE(rdma_create_qp(ud, NULL, &qa) == 0, "rdma_create_qp(UD): %s", strerror(errno));
		mc.comp_mask = 1 << 2;
		mc.addr = (struct sockaddr *)&grp;
		errno = 0;
		EXPECT(rdma_join_multicast_ex(ud, &mc, NULL) == -1 && errno == ENOTSUP, "an unknown mask bit: ENOTSUP (%d)", errno);
		mc.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS;
		errno = 0;
		EXPECT(rdma_join_multicast_ex(ud, &mc, NULL) == -1 && errno == EINVAL, "no join flags: EINVAL (%d)", errno);
		errno = 0;
		EXPECT(rdma_join_multicast(ud, (struct sockaddr *)&sin, NULL) == -1 && errno == EINVAL,
		       "a unicast address is no group: EINVAL (%d)", errno);

		EXPECT(rdma_join_multicast(ud, (struct sockaddr *)&grp, &ctx_cookie) == 0, "rdma_join_multicast: %s",
		       strerror(errno));
		REQUIRE(ud->event != NULL, "a synchronous join waits for its event");
		EXPECT(ud->event->event == RDMA_CM_EVENT_MULTICAST_JOIN, "MULTICAST_JOIN (%d)", ud->event->event);
		EXPECT(ud->event->param.ud.private_data == &ctx_cookie, "the join's context in param.ud.private_data");
		EXPECT(ud->event->param.ud.qp_num == 0xffffff && ud->event->param.ud.qkey == 0x01234567,
		       "QPN %#x, Q_Key %#x", ud->event->param.ud.qp_num, ud->event->param.ud.qkey);
		EXPECT(ud->event->param.ud.ah_attr.is_global &&
			       memcmp(ud->event->param.ud.ah_attr.grh.dgid.raw, mgid.raw, 16) == 0 &&
			       ud->event->param.ud.ah_attr.grh.hop_limit == 64 && ud->event->param.ud.ah_attr.dlid == 0,
		       "the AH leads to ::ffff:239.123.4.5, hop limit 64, mlid 0");
		EXPECT(ibv_destroy_qp(ud->qp) == EBUSY, "an attached QP cannot be destroyed (EBUSY)");
		EXPECT(ibv_detach_mcast(ud->qp, &mgid, 0) == 0, "ibv_detach_mcast");
		EXPECT(ibv_detach_mcast(ud->qp, &mgid, 0) == EINVAL, "detached twice: EINVAL");
		EXPECT(rdma_leave_multicast(ud, (struct sockaddr *)&grp) == 0, "rdma_leave_multicast: %s", strerror(errno));
		errno = 0;
		EXPECT(rdma_leave_multicast(ud, (struct sockaddr *)&grp) == -1 && errno == EADDRNOTAVAIL,
		       "left twice: EADDRNOTAVAIL (%d)", errno);
		rdma_destroy_ep(ud);
	}
	end();

	rdma_destroy_ep(id);
	return finish();
}
