// A 2-D data x tensor parallel training step in miniature, on a mesh with named axes:
//
//   tutti_example_mesh                               4 ranks as threads, a 2 x 2 mesh
//   tuttirun --nproc-per-node=6 tutti_example_mesh   6 processes over shm, a 3 x 2 mesh (dp x tp)
//
// One linear layer Y = X W (W: H x O) with W split by columns over tp (rank t holds W_t, O/T of
// its columns), and each dp row of the mesh its own batch X_d:
//   forward   Y_t = X_d W_t, then all_gather over tp: every tp rank sees the whole Y (for the loss)
//   loss      L = 1/2 |Y - target|^2, so dY = Y - target
//   backward  dW_t = X_d^T dY_t (local); dX = dY W^T = sum over t of dY_t W_t^T, which
//             reduce_scatter over tp leaves split by rows (each tp rank its B/T rows)
//   update    dW_t averaged over dp (all_reduce with op::avg), W_t -= lr dW_t
// Every rank checks its W_t and its rows of dX against the same step computed serially; the
// values are small integers and lr a power of two, so the results compare exactly.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <tutti/group/mesh.hpp>
#include <tutti/tutti.hpp>
#include <vector>

namespace {

constexpr int B = 4, H = 3, O = 4;  // batch rows per dp rank, inputs, outputs
constexpr double lr = 0.125;

double x_of(int d, int b, int h) { return ((d * 5 + b * 3 + h) % 7) - 3; }
double target_of(int d, int b, int o) { return ((d + b * 2 + o * 3) % 5) - 2; }
double w_of(int h, int o) { return ((h * 4 + o) % 3) - 1; }

/// The serial step over the whole batch: the updated W (H x O) and each dp row's dX (B x H).
void reference(int D, std::vector<double>& w, std::vector<std::vector<double>>& dx) {
  std::vector<double> w0(H * O), grad(H * O, 0.0);
  for (int h = 0; h < H; ++h)
    for (int o = 0; o < O; ++o) w0[h * O + o] = w_of(h, o);
  dx.assign(static_cast<std::size_t>(D), std::vector<double>(B * H, 0.0));
  for (int d = 0; d < D; ++d)
    for (int b = 0; b < B; ++b)
      for (int o = 0; o < O; ++o) {
        double y = 0;
        for (int h = 0; h < H; ++h) y += x_of(d, b, h) * w0[h * O + o];
        const double dy = y - target_of(d, b, o);
        for (int h = 0; h < H; ++h) {
          grad[h * O + o] += x_of(d, b, h) * dy;
          dx[static_cast<std::size_t>(d)][b * H + h] += dy * w0[h * O + o];
        }
      }
  w.resize(H * O);
  for (int i = 0; i < H * O; ++i) w[i] = w0[i] - lr * (grad[i] / D);  // sum, then the average
}

/// One training step on this rank of a D x T mesh; returns the number of wrong values.
template <class Comm>
int train_step(Comm& comm, int D, int T) {
  auto m = tutti::mesh<tutti::axis<"dp">, tutti::axis<"tp">>(comm, {D, T});
  auto& dp = m.template axis<"dp">();
  auto& tp = m.template axis<"tp">();
  const int d = m.template coordinate<"dp">(), t = m.template coordinate<"tp">();
  const int cols = O / T, rows = B / T;

  std::vector<double> x(B * H), w(H * cols);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) x[b * H + h] = x_of(d, b, h);
  for (int h = 0; h < H; ++h)
    for (int c = 0; c < cols; ++c) w[h * cols + c] = w_of(h, t * cols + c);

  // Forward: this rank's columns of Y, then all of Y from the tp ranks (block k: columns of rank k).
  std::vector<double> y_t(B * cols, 0.0), y(B * O);
  for (int b = 0; b < B; ++b)
    for (int c = 0; c < cols; ++c)
      for (int h = 0; h < H; ++h) y_t[b * cols + c] += x[b * H + h] * w[h * cols + c];
  tp.all_gather(tutti::view(y_t), tutti::view(y));
  auto y_at = [&](int b, int o) { return y[(o / cols) * B * cols + b * cols + o % cols]; };

  // Backward.
  std::vector<double> dw(H * cols, 0.0), dx_partial(B * H, 0.0), dx_rows(rows * H);
  for (int b = 0; b < B; ++b)
    for (int c = 0; c < cols; ++c) {
      const int o = t * cols + c;
      const double dy = y_at(b, o) - target_of(d, b, o);
      for (int h = 0; h < H; ++h) {
        dw[h * cols + c] += x[b * H + h] * dy;
        dx_partial[b * H + h] += dy * w[h * cols + c];
      }
    }
  tp.reduce_scatter(tutti::view(dx_partial), tutti::view(dx_rows));
  dp.all_reduce(tutti::view(dw), tutti::op::avg{});
  for (int i = 0; i < H * cols; ++i) w[i] -= lr * dw[i];

  // Check against the serial step.
  std::vector<double> want_w;
  std::vector<std::vector<double>> want_dx;
  reference(D, want_w, want_dx);
  int wrong = 0;
  for (int h = 0; h < H; ++h)
    for (int c = 0; c < cols; ++c) wrong += w[h * cols + c] != want_w[h * O + t * cols + c];
  for (int r = 0; r < rows; ++r)
    for (int h = 0; h < H; ++h) wrong += dx_rows[r * H + h] != want_dx[static_cast<std::size_t>(d)][(t * rows + r) * H + h];
  std::printf("rank %d (dp %d, tp %d): W columns %d..%d updated, dX rows %d..%d, %s\n", m.rank(), d, t, t * cols,
              t * cols + cols - 1, t * rows, t * rows + rows - 1, wrong ? "WRONG" : "as the serial step");
  return wrong;
}

}  // namespace

int main() {
  try {
    if (std::getenv("WORLD_SIZE")) {  // under tuttirun: processes over shared memory
      auto comm = tutti::communicator<tutti::shm>::from_env();
      const int T = 2, D = comm.size() / T;
      if (comm.size() % T != 0 || O % T != 0 || B % T != 0) {
        std::fprintf(stderr, "mesh example: run an even number of ranks\n");
        return 2;
      }
      return train_step(comm, D, T) ? 1 : 0;
    }
    int wrong = 0;
    tutti::inproc::run(4, [&](auto& comm) {
      int w = train_step(comm, 2, 2);
      comm.all_reduce(tutti::view(&w, 1));
      if (comm.rank() == 0) wrong = w;
    });
    return wrong ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mesh example: %s\n", e.what());
    return 1;
  }
}
