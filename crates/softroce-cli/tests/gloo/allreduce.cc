// gloo's ring allreduce between SIZE processes, each checking every
// element of its result: `allreduce RANK SIZE STOREDIR DEVICE`.
//
// The ranks meet through a gloo FileStore in STOREDIR. DEVICE "tcp" is
// gloo's TCP transport on 127.0.0.1 ("tcp:ADDR" on ADDR); any other name
// is an ibverbs device (port 1; GID index 1, or DEVICE:INDEX). This gloo (2022) has no
// unbound buffers on ibverbs, so the collective is the algorithm class
// gloo::AllreduceRing rather than gloo::allreduce().
//
// Rank r contributes element i = r * 1000 + i as a float: every partial
// sum stays below 2^24, so the expected sum is exact. Each size runs a
// few times (the input refilled before each, only run() timed) and is
// checked after every run. Prints per size
//   rank R: allreduce N elements verified iterations=K us=T
// (T the mean microseconds of one run()), then `rank R: done` after a
// final barrier, and exits: 0 when every element was right, 1 on a
// mismatch, 2 on an error. Two races of this gloo's ibverbs transport at
// teardown are kept out (Ring, Barrier and quiesce below): without them a
// rank aborted in every run over softroce, and in about one run in ten
// of 3 ranks one died of SIGSEGV after its barrier.

#include <gloo/allreduce_ring.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/ibverbs/device.h>
#include <gloo/transport/ibverbs/pair.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Size {
  size_t elements;
  int iterations;
};

// gloo::AllreduceRing that can wait for its last notification writes.
// run() writes a notification to the left neighbour in every round and
// never waits for it, and this gloo's ibverbs Buffer destructor
// enforces that no send is pending ("Destructing buffer expecting
// completions", thrown from a destructor: std::terminate). The write's
// completion needs the neighbour's ACK, which can come after run()
// returned: drain() takes one send completion per notification written.
template <typename T>
class Ring : public gloo::AllreduceRing<T> {
 public:
  using gloo::AllreduceRing<T>::AllreduceRing;

  void run() override {
    gloo::AllreduceRing<T>::run();
    notifications_ += this->contextSize_ - 1;
  }

  void drain() {
    for (; notifications_ > 0; notifications_--) {
      this->sendNotificationBuf_->waitSend();
    }
  }

 private:
  long notifications_ = 0;
};

// gloo::BarrierAllToAll whose run() also waits until every peer has
// acknowledged this rank's notification (see Ring).
class Barrier : public gloo::BarrierAllToAll {
 public:
  using gloo::BarrierAllToAll::BarrierAllToAll;

  void run() override {
    gloo::BarrierAllToAll::run();
    for (auto& buffer : sendBuffers_) {
      buffer->waitSend();
    }
  }
};

// The mutex of an ibverbs pair, which gloo's device thread holds while it
// handles the pair's completions (a protected member, named through a
// derived class). The thread wakes the rank waiting for a completion and
// then, still holding it, posts the receive that replaces the one used.
// This gloo's ~Pair does not take it (gloo's does since 2025), so a
// rank that destroys its context right after its last wake-up can free
// the pair under that thread (SIGSEGV in Pair::postReceive). Taking each
// pair's mutex once after the final barrier waits that handler out.
struct PairMutex : gloo::transport::ibverbs::Pair {
  static std::mutex& of(gloo::transport::ibverbs::Pair& pair) { return pair.*(&PairMutex::m_); }
};

void quiesce(gloo::Context& context) {
  for (int i = 0; i < context.size; i++) {
    if (i == context.rank) {
      continue;
    }
    auto* pair = dynamic_cast<gloo::transport::ibverbs::Pair*>(context.getPair(i).get());
    if (pair != nullptr) {
      std::lock_guard<std::mutex> wait(PairMutex::of(*pair));
    }
  }
}

const Size kSizes[] = {{1, 200}, {1024, 100}, {256 * 1024, 10}, {4 * 1024 * 1024, 5}};

std::shared_ptr<gloo::transport::Device> open_device(const std::string& name) {
  if (name == "tcp" || name.rfind("tcp:", 0) == 0) {
    gloo::transport::tcp::attr attr(name == "tcp" ? "127.0.0.1" : name.substr(4).c_str());
    return gloo::transport::tcp::CreateDevice(attr);
  }
  gloo::transport::ibverbs::attr attr;
  attr.name = name;
  attr.port = 1;
  attr.index = 1;
  auto colon = name.find(':');
  if (colon != std::string::npos) {
    attr.name = name.substr(0, colon);
    attr.index = std::atoi(name.c_str() + colon + 1);
  }
  return gloo::transport::ibverbs::CreateDevice(attr);
}

float contribution(int rank, size_t i) {
  return static_cast<float>(static_cast<size_t>(rank) * 1000 + i);
}

// The sum over `size` ranks of contribution(r, i).
float expected(int size, size_t i) {
  return static_cast<float>(static_cast<size_t>(size) * i + 1000 * static_cast<size_t>(size * (size - 1) / 2));
}

// Number of wrong elements of `v`, the first few printed.
size_t check(int rank, int size, const std::vector<float>& v) {
  size_t wrong = 0;
  for (size_t i = 0; i < v.size(); i++) {
    if (v[i] != expected(size, i)) {
      if (wrong < 5) {
        std::printf("rank %d: MISMATCH at element %zu of %zu: %.1f, expected %.1f\n", rank, i, v.size(),
                    static_cast<double>(v[i]), static_cast<double>(expected(size, i)));
      }
      wrong++;
    }
  }
  return wrong;
}

int run(int rank, int size, const std::string& storedir, const std::string& device) {
  gloo::rendezvous::FileStore files(storedir);
  // Keys by transport: the TCP ranks name different addresses.
  gloo::rendezvous::PrefixStore store(device.substr(0, device.find(':')), files);
  auto dev = open_device(device);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->setTimeout(std::chrono::seconds(60));
  context->connectFullMesh(store, dev);
  std::printf("rank %d: connected over %s\n", rank, dev->str().c_str());

  size_t wrong = 0;
  for (const Size& s : kSizes) {
    std::vector<float> data(s.elements);
    std::vector<float*> ptrs{data.data()};
    Ring<float> ring(context, ptrs, static_cast<int>(s.elements));
    std::chrono::duration<double, std::micro> spent(0);
    size_t wrong_here = 0;
    for (int it = 0; it < s.iterations; it++) {
      for (size_t i = 0; i < s.elements; i++) {
        data[i] = contribution(rank, i);
      }
      auto start = std::chrono::steady_clock::now();
      ring.run();
      spent += std::chrono::steady_clock::now() - start;
      wrong_here += check(rank, size, data);
    }
    ring.drain();
    if (wrong_here == 0) {
      std::printf("rank %d: allreduce %zu elements verified iterations=%d us=%.1f\n", rank, s.elements,
                  s.iterations, spent.count() / s.iterations);
    } else {
      std::printf("rank %d: allreduce %zu elements: %zu wrong\n", rank, s.elements, wrong_here);
    }
    std::fflush(stdout);
    wrong += wrong_here;
  }

  Barrier(context).run();
  quiesce(*context);
  // No rank closes its connections before every rank is past the
  // barrier: over gloo's TCP transport a peer's close (its FIN right behind
  // its last notification) failed a rank still in the barrier with
  // "Connection closed by peer" (CI, 1 run of 3 ranks). The ranks meet in
  // the file store for this, outside the transport under test.
  store.set("exit/" + std::to_string(rank), std::vector<char>{'1'});
  std::vector<std::string> all;
  for (int r = 0; r < size; r++) {
    all.push_back("exit/" + std::to_string(r));
  }
  store.wait(all, std::chrono::seconds(60));
  std::printf("rank %d: done\n", rank);
  std::fflush(stdout);
  return wrong == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s RANK SIZE STOREDIR DEVICE\n", argv[0]);
    return 2;
  }
  int rank = std::atoi(argv[1]);
  int size = std::atoi(argv[2]);
  try {
    return run(rank, size, argv[3], argv[4]);
  } catch (const std::exception& e) {
    std::printf("rank %d: error: %s\n", rank, e.what());
    return 2;
  }
}
