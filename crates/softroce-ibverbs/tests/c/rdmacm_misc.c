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

	rdma_destroy_ep(id);
	return finish();
}
