"""python3-pyverbs (rdma-core's own bindings) against a softhca device.

Run with Debian's /usr/bin/python3 under `softhca exec`."""
import errno
import os
import unittest

import pyverbs.device as d
import pyverbs.enums as e
from pyverbs.cq import CQ
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError

DEVICE = os.environ.get("SOFTHCA_TEST_DEVICE", "softhca0")


class SofthcaDevice(unittest.TestCase):
    def setUp(self):
        self.ctx = d.Context(name=DEVICE)

    def tearDown(self):
        self.ctx.close()

    def test_device_is_listed(self):
        names = [dev.name.decode() for dev in d.get_device_list()]
        self.assertIn(DEVICE, names)

    def test_query_device(self):
        attr = self.ctx.query_device()
        self.assertNotEqual(attr.vendor_id, 0x02C9)
        self.assertEqual(attr.phys_port_cnt, 1)
        self.assertGreater(attr.max_pd, 0)
        self.assertGreater(attr.max_cqe, 0)
        self.assertNotEqual(attr.node_guid, 0)

    def test_query_port(self):
        port = self.ctx.query_port(1)
        self.assertEqual(port.state, e.IBV_PORT_ACTIVE)
        self.assertEqual(port.link_layer, e.IBV_LINK_LAYER_ETHERNET)
        self.assertIn(port.active_mtu, (e.IBV_MTU_1024, e.IBV_MTU_2048, e.IBV_MTU_4096))

    def test_query_gid(self):
        gid = str(self.ctx.query_gid(1, 0))
        self.assertTrue(gid.startswith("0000:0000:0000:0000:0000:ffff:c612:"), gid)
        entry = self.ctx.query_gid_ex(1, 0)
        self.assertEqual(entry.gid_type, e.IBV_GID_TYPE_ROCE_V2)

    def test_pd_mr_cq(self):
        with PD(self.ctx) as pd:
            access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
            with MR(pd, 65536, access) as mr:
                self.assertNotEqual(mr.lkey, 0)
                mr.write(b"softhca", 7)
                self.assertEqual(mr.read(7, 0), b"softhca")
            with CQ(self.ctx, 128) as cq:
                self.assertGreaterEqual(cq.cqe, 128)
                self.assertEqual(cq.poll(), (0, []))

    def test_bad_access_flags(self):
        with PD(self.ctx) as pd:
            with self.assertRaises(PyverbsRDMAError) as raised:
                MR(pd, 4096, e.IBV_ACCESS_REMOTE_WRITE)
            self.assertEqual(raised.exception.error_code, errno.EINVAL)


if __name__ == "__main__":
    unittest.main(verbosity=2)
