// tutti::cuda_ipc's plans (tutti/transport/device/plans.hpp), run on host memory: every rank's
// plan, phase by phase (every rank's phase 1, then every rank's phase 2, as the barriers order
// them on the device), and the outputs against what the collective must give, for 1 to 5 ranks
// and counts from 0 to past the two-shot's block alignment. Also that no rank's plan writes
// memory it does not own, and that reading what a peer may still change is never planned.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <tutti/core/counts.hpp>
#include <tutti/transport/device/plans.hpp>
#include <vector>

using namespace tutti;
namespace dv = tutti::detail::device;

namespace {

/// One host "rank": its input, output and staging buffer (floats).
struct host_rank {
  std::vector<float> in, out, stage;
};

struct world {
  int p;
  std::vector<host_rank> ranks;
  explicit world(int n) : p(n), ranks(static_cast<std::size_t>(n)) {}

  /// The call view of rank r (in-place: `in` is `out`).
  dv::call_view view(int r, bool in_place = false) {
    dv::call_view v;
    v.rank = r;
    v.size = p;
    v.elem = sizeof(float);
    for (auto& k : ranks) {
      v.in.push_back(reinterpret_cast<const std::byte*>(in_place ? k.out.data() : k.in.data()));
      v.out.push_back(reinterpret_cast<std::byte*>(k.out.data()));
      v.stage.push_back(reinterpret_cast<const std::byte*>(k.stage.data()));
    }
    return v;
  }

  /// Every rank's plan, phase by phase; a reduction sums its sources in order. Checks that every
  /// write lands in the writer's own output.
  void run(std::vector<dv::plan> plans) {
    for (int r = 0; r < p; ++r)
      if (plans[static_cast<std::size_t>(r)].stage_input) {
        auto& k = ranks[static_cast<std::size_t>(r)];
        k.stage.assign(k.out.begin(), k.out.end());  // the in-place one-shot's copy (in is out)
      }
    for (int ph = 0; ph < 2; ++ph)
      for (int r = 0; r < p; ++r) {
        const dv::plan& pl = plans[static_cast<std::size_t>(r)];
        if (ph >= pl.phases) continue;
        const dv::step& s = pl.phase[static_cast<std::size_t>(ph)];
        auto& mine = ranks[static_cast<std::size_t>(r)].out;
        auto owned = [&](const std::byte* d, std::size_t bytes) {
          const auto* lo = reinterpret_cast<const std::byte*>(mine.data());
          return bytes == 0 || (d >= lo && d + bytes <= lo + mine.size() * sizeof(float));
        };
        if (s.k == dv::step::kind::reduce && s.count) {
          REQUIRE(owned(s.dst, s.count * sizeof(float)));
          std::vector<float> acc(s.count, 0.0f);
          for (int q = 0; q < s.nsrc; ++q) {
            const auto* src = reinterpret_cast<const float*>(s.src[static_cast<std::size_t>(q)]);
            for (std::size_t i = 0; i < s.count; ++i) acc[i] = q == 0 ? src[i] : acc[i] + src[i];
          }
          std::memcpy(s.dst, acc.data(), s.count * sizeof(float));
        } else if (s.k == dv::step::kind::copy) {
          for (const dv::segment& c : s.copies) {
            REQUIRE(owned(c.dst, c.bytes));
            std::memmove(c.dst, c.src, c.bytes);
          }
        }
      }
  }
};

float value(int rank, std::size_t i) { return static_cast<float>(rank * 1000 + static_cast<int>(i % 977)); }

}  // namespace

TEST_SUITE_BEGIN("unit");

TEST_CASE("device plans: all_reduce one-shot and two-shot, in and out of place, on 1-5 ranks") {
  for (int p = 1; p <= 5; ++p)
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{4}, std::size_t{17}, std::size_t{64},
                          std::size_t{1000}, std::size_t{4099}})
      for (bool one_shot : {true, false})
        for (bool in_place : {false, true}) {
          CAPTURE(p);
          CAPTURE(n);
          CAPTURE(one_shot);
          CAPTURE(in_place);
          world w(p);
          for (int r = 0; r < p; ++r) {
            auto& k = w.ranks[static_cast<std::size_t>(r)];
            k.in.resize(n);
            k.out.assign(n, -1.0f);
            k.stage.assign(n, -2.0f);
            for (std::size_t i = 0; i < n; ++i) (in_place ? k.out : k.in)[i] = value(r, i);
          }
          std::vector<dv::plan> plans;
          for (int r = 0; r < p; ++r) plans.push_back(dv::plans::all_reduce(w.view(r, in_place), n, one_shot, in_place));
          w.run(plans);
          for (int r = 0; r < p; ++r)
            for (std::size_t i = 0; i < n; ++i) {
              float want = 0;
              for (int q = 0; q < p; ++q) want = q == 0 ? value(q, i) : want + value(q, i);
              REQUIRE(w.ranks[static_cast<std::size_t>(r)].out[i] == want);
            }
        }
}

TEST_CASE("device plans: the two-shot's blocks cover the buffer once, on 16-byte boundaries") {
  for (int p = 1; p <= 7; ++p)
    for (std::size_t n : {0, 1, 5, 16, 100, 1023, 4096, 100003}) {
      std::size_t next = 0;
      for (int b = 0; b < p; ++b) {
        const auto r = dv::two_shot_block(n, p, b, 4);
        CHECK(r.first == next);
        if (r.count && b + 1 < p && r.first + r.count < n) CHECK((r.first + r.count) % 4 == 0);
        next = r.first + r.count;
      }
      CHECK(next == n);
    }
}

TEST_CASE("device plans: broadcast, reduce, gather, all_gather, scatter, all_to_all, reduce_scatter") {
  for (int p = 1; p <= 5; ++p)
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{300}})
      for (int root = 0; root < p; ++root) {
        CAPTURE(p);
        CAPTURE(n);
        CAPTURE(root);
        const auto P = static_cast<std::size_t>(p);
        const std::size_t bytes = n * sizeof(float);
        {  // broadcast: in place
          world w(p);
          for (int r = 0; r < p; ++r)
            for (std::size_t i = 0; i < n; ++i) w.ranks[static_cast<std::size_t>(r)].out.push_back(value(r, i));
          std::vector<dv::plan> plans;
          for (int r = 0; r < p; ++r) plans.push_back(dv::plans::broadcast(w.view(r, true), bytes, root));
          w.run(plans);
          for (int r = 0; r < p; ++r)
            for (std::size_t i = 0; i < n; ++i) REQUIRE(w.ranks[static_cast<std::size_t>(r)].out[i] == value(root, i));
        }
        {  // reduce: in place at the root, the others unchanged
          world w(p);
          for (int r = 0; r < p; ++r)
            for (std::size_t i = 0; i < n; ++i) w.ranks[static_cast<std::size_t>(r)].out.push_back(value(r, i));
          std::vector<dv::plan> plans;
          for (int r = 0; r < p; ++r) plans.push_back(dv::plans::reduce(w.view(r, true), n, root));
          w.run(plans);
          for (int r = 0; r < p; ++r)
            for (std::size_t i = 0; i < n; ++i) {
              float want = 0;
              for (int q = 0; q < p; ++q) want = q == 0 ? value(q, i) : want + value(q, i);
              REQUIRE(w.ranks[static_cast<std::size_t>(r)].out[i] == (r == root ? want : value(r, i)));
            }
        }
        {  // gather, all_gather: out = p blocks
          for (bool all : {false, true}) {
            world w(p);
            for (int r = 0; r < p; ++r) {
              auto& k = w.ranks[static_cast<std::size_t>(r)];
              for (std::size_t i = 0; i < n; ++i) k.in.push_back(value(r, i));
              k.out.assign(n * P, -1.0f);
            }
            std::vector<dv::plan> plans;
            for (int r = 0; r < p; ++r)
              plans.push_back(all ? dv::plans::all_gather(w.view(r), bytes) : dv::plans::gather(w.view(r), bytes, root));
            w.run(plans);
            for (int r = 0; r < p; ++r)
              for (int q = 0; q < p; ++q)
                for (std::size_t i = 0; i < n; ++i)
                  REQUIRE(w.ranks[static_cast<std::size_t>(r)].out[static_cast<std::size_t>(q) * n + i] ==
                          (all || r == root ? value(q, i) : -1.0f));
          }
        }
        {  // scatter: root's in = p blocks
          world w(p);
          for (int r = 0; r < p; ++r) {
            auto& k = w.ranks[static_cast<std::size_t>(r)];
            for (std::size_t i = 0; i < n * P; ++i) k.in.push_back(value(r, i));
            k.out.assign(n, -1.0f);
          }
          std::vector<dv::plan> plans;
          for (int r = 0; r < p; ++r) plans.push_back(dv::plans::scatter(w.view(r), bytes, root));
          w.run(plans);
          for (int r = 0; r < p; ++r)
            for (std::size_t i = 0; i < n; ++i)
              REQUIRE(w.ranks[static_cast<std::size_t>(r)].out[i] == value(root, static_cast<std::size_t>(r) * n + i));
        }
        if (root == 0) {  // all_to_all, reduce_scatter
          world w(p);
          for (int r = 0; r < p; ++r) {
            auto& k = w.ranks[static_cast<std::size_t>(r)];
            for (std::size_t i = 0; i < n * P; ++i) k.in.push_back(value(r, i));
            k.out.assign(n * P, -1.0f);
          }
          std::vector<dv::plan> plans;
          for (int r = 0; r < p; ++r) plans.push_back(dv::plans::all_to_all(w.view(r), bytes));
          w.run(plans);
          for (int r = 0; r < p; ++r)
            for (int q = 0; q < p; ++q)
              for (std::size_t i = 0; i < n; ++i)
                REQUIRE(w.ranks[static_cast<std::size_t>(r)].out[static_cast<std::size_t>(q) * n + i] ==
                        value(q, static_cast<std::size_t>(r) * n + i));
          world x(p);
          for (int r = 0; r < p; ++r) {
            auto& k = x.ranks[static_cast<std::size_t>(r)];
            for (std::size_t i = 0; i < n * P; ++i) k.in.push_back(value(r, i));
            k.out.assign(n, -1.0f);
          }
          plans.clear();
          for (int r = 0; r < p; ++r) plans.push_back(dv::plans::reduce_scatter(x.view(r), n));
          x.run(plans);
          for (int r = 0; r < p; ++r)
            for (std::size_t i = 0; i < n; ++i) {
              const std::size_t at = static_cast<std::size_t>(r) * n + i;
              float want = 0;
              for (int q = 0; q < p; ++q) want = q == 0 ? value(q, at) : want + value(q, at);
              REQUIRE(x.ranks[static_cast<std::size_t>(r)].out[i] == want);
            }
        }
      }
}

TEST_CASE("device plans: the v-collectives, with zero counts and one rank holding everything") {
  for (int p = 1; p <= 5; ++p) {
    const auto P = static_cast<std::size_t>(p);
    for (int pattern = 0; pattern < 3; ++pattern) {
      CAPTURE(p);
      CAPTURE(pattern);
      std::vector<std::size_t> counts(P);
      for (std::size_t r = 0; r < P; ++r)
        counts[r] = pattern == 0 ? r * 3 + 1 : pattern == 1 ? (r % 2 ? 0 : r + 2) : (r == P - 1 ? 40 : 0);
      const auto offsets = displacements(counts);
      const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
      block_counts b{counts, offsets, total, *std::max_element(counts.begin(), counts.end())};
      for (int root = 0; root < p; ++root) {
        {  // all_gather_v, gather_v: rank q's in = counts[q]
          for (bool all : {true, false}) {
            if (all && root) continue;
            world w(p);
            for (int r = 0; r < p; ++r) {
              auto& k = w.ranks[static_cast<std::size_t>(r)];
              for (std::size_t i = 0; i < counts[static_cast<std::size_t>(r)]; ++i) k.in.push_back(value(r, i));
              k.out.assign(total, -1.0f);
            }
            std::vector<dv::plan> plans;
            for (int r = 0; r < p; ++r)
              plans.push_back(all ? dv::plans::all_gather_v(w.view(r), b) : dv::plans::gather_v(w.view(r), b, root));
            w.run(plans);
            for (int r = 0; r < p; ++r)
              for (int q = 0; q < p; ++q)
                for (std::size_t i = 0; i < counts[static_cast<std::size_t>(q)]; ++i)
                  REQUIRE(w.ranks[static_cast<std::size_t>(r)].out[offsets[static_cast<std::size_t>(q)] + i] ==
                          (all || r == root ? value(q, i) : -1.0f));
          }
        }
        {  // scatter_v: the root's in = total; each rank pulls at the offset the root published
          world w(p);
          for (int r = 0; r < p; ++r) {
            auto& k = w.ranks[static_cast<std::size_t>(r)];
            for (std::size_t i = 0; i < total; ++i) k.in.push_back(value(r, i));
            k.out.assign(counts[static_cast<std::size_t>(r)], -1.0f);
          }
          std::vector<dv::plan> plans;
          for (int r = 0; r < p; ++r)
            plans.push_back(dv::plans::scatter_v(w.view(r), offsets[static_cast<std::size_t>(r)], counts[static_cast<std::size_t>(r)], root));
          w.run(plans);
          for (int r = 0; r < p; ++r)
            for (std::size_t i = 0; i < counts[static_cast<std::size_t>(r)]; ++i)
              REQUIRE(w.ranks[static_cast<std::size_t>(r)].out[i] == value(root, offsets[static_cast<std::size_t>(r)] + i));
        }
      }
      {  // all_to_all_v: rank i sends (i + j) % 3 elements to rank j
        auto cnt = [](std::size_t i, std::size_t j) { return (i + j) % 3 + (i == j ? 1 : 0); };
        world w(p);
        std::vector<std::vector<std::size_t>> send(P), recv(P);
        for (std::size_t i = 0; i < P; ++i)
          for (std::size_t j = 0; j < P; ++j) {
            send[i].push_back(cnt(i, j));
            recv[i].push_back(cnt(j, i));
          }
        for (int r = 0; r < p; ++r) {
          auto& k = w.ranks[static_cast<std::size_t>(r)];
          const auto R = static_cast<std::size_t>(r);
          for (std::size_t i = 0; i < std::accumulate(send[R].begin(), send[R].end(), std::size_t{0}); ++i)
            k.in.push_back(value(r, i));
          k.out.assign(std::accumulate(recv[R].begin(), recv[R].end(), std::size_t{0}), -1.0f);
        }
        std::vector<dv::plan> plans;
        std::vector<std::vector<std::size_t>> soff(P), roff(P);
        for (std::size_t i = 0; i < P; ++i) {
          soff[i] = displacements(send[i]);
          roff[i] = displacements(recv[i]);
        }
        for (int r = 0; r < p; ++r) {
          const auto R = static_cast<std::size_t>(r);
          block_counts rb{recv[R], roff[R], 0, 0};
          std::vector<std::size_t> from(P);
          for (std::size_t q = 0; q < P; ++q) from[q] = soff[q][R];  // what rank q published for r
          plans.push_back(dv::plans::all_to_all_v(w.view(r), rb, from));
        }
        w.run(plans);
        for (std::size_t r = 0; r < P; ++r)
          for (std::size_t q = 0; q < P; ++q)
            for (std::size_t i = 0; i < recv[r][q]; ++i)
              REQUIRE(w.ranks[r].out[roff[r][q] + i] == value(static_cast<int>(q), soff[q][r] + i));
      }
      {  // reduce_scatter_v: in = total, rank r gets its block reduced
        world w(p);
        for (int r = 0; r < p; ++r) {
          auto& k = w.ranks[static_cast<std::size_t>(r)];
          for (std::size_t i = 0; i < total; ++i) k.in.push_back(value(r, i));
          k.out.assign(counts[static_cast<std::size_t>(r)], -1.0f);
        }
        std::vector<dv::plan> plans;
        for (int r = 0; r < p; ++r) plans.push_back(dv::plans::reduce_scatter_v(w.view(r), b));
        w.run(plans);
        for (int r = 0; r < p; ++r)
          for (std::size_t i = 0; i < counts[static_cast<std::size_t>(r)]; ++i) {
            const std::size_t at = offsets[static_cast<std::size_t>(r)] + i;
            float want = 0;
            for (int q = 0; q < p; ++q) want = q == 0 ? value(q, at) : want + value(q, at);
            REQUIRE(w.ranks[static_cast<std::size_t>(r)].out[i] == want);
          }
      }
    }
  }
}

TEST_SUITE_END();
