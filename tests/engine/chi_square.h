// Pearson chi-square goodness of fit with a real p-value, for the statistical
// tests of sampling (speculative_sampling_test.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace specstack {

// Q(a, x) = Gamma(a, x) / Gamma(a), the regularised upper incomplete gamma
// function: the series for P = 1 - Q below x = a + 1, where it converges
// fast, and Lentz's continued fraction for Q above, where the series would
// lose Q to cancellation (Numerical Recipes 6.2).
inline double gamma_q(double a, double x) {
  if (x <= 0.0) return 1.0;
  const double log_prefactor = -x + a * std::log(x) - std::lgamma(a);
  if (x < a + 1.0) {
    double term = 1.0 / a;
    double sum = term;
    for (int n = 1; n < 10000; ++n) {
      term *= x / (a + n);
      sum += term;
      if (std::fabs(term) < std::fabs(sum) * 1e-16) break;
    }
    return std::max(0.0, 1.0 - sum * std::exp(log_prefactor));
  }
  constexpr double kTiny = 1e-300;
  double b = x + 1.0 - a;
  double c = 1.0 / kTiny;
  double d = 1.0 / b;
  double h = d;
  for (int i = 1; i < 10000; ++i) {
    const double an = -i * (i - a);
    b += 2.0;
    d = an * d + b;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = b + an / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1.0 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1.0) < 1e-16) break;
  }
  return std::exp(log_prefactor) * h;
}

// P(X >= x) for X ~ chi-square with df degrees of freedom.
inline double chi_square_survival(double df, double x) {
  return gamma_q(df / 2.0, x / 2.0);
}

struct ChiSquareFit {
  double statistic = 0.0;
  int df = 0;
  double p_value = 1.0;
  int64_t zero_probability_hits = 0;  // observations of tokens with probability 0
};

// counts [cells] against probs [cells] (normalised here). Cells with
// probability 0 are left out of the statistic and their observations are
// reported instead (a correct sampler never produces them); cells with an
// expected count below 5 are merged, smallest first, so the chi-square
// approximation holds.
inline ChiSquareFit chi_square_fit(const std::vector<int64_t>& counts,
                                   const std::vector<double>& probs) {
  ChiSquareFit fit;
  double prob_total = 0.0;
  int64_t n = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    prob_total += probs[i];
    n += counts[i];
  }
  struct Cell {
    double expected;
    int64_t observed;
  };
  std::vector<Cell> cells;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (probs[i] > 0.0) {
      cells.push_back({probs[i] / prob_total * static_cast<double>(n), counts[i]});
    } else {
      fit.zero_probability_hits += counts[i];
    }
  }
  const auto smaller = [](const Cell& a, const Cell& b) { return a.expected < b.expected; };
  std::sort(cells.begin(), cells.end(), smaller);
  while (cells.size() > 1 && cells[0].expected < 5.0) {
    const Cell merged = {cells[0].expected + cells[1].expected,
                         cells[0].observed + cells[1].observed};
    cells.erase(cells.begin(), cells.begin() + 2);
    cells.insert(std::lower_bound(cells.begin(), cells.end(), merged, smaller), merged);
  }
  for (const Cell& cell : cells) {
    const double diff = static_cast<double>(cell.observed) - cell.expected;
    fit.statistic += diff * diff / cell.expected;
  }
  fit.df = static_cast<int>(cells.size()) - 1;
  fit.p_value = fit.df > 0 ? chi_square_survival(fit.df, fit.statistic) : 1.0;
  return fit;
}

// Two samples' counts [cells] drawn from one law? (Pearson's homogeneity
// test: 2 x cells table, expected counts from the pooled frequencies, df =
// cells - 1.) Cells whose pooled expected count in either sample is below 5
// are merged, smallest first, as above.
inline ChiSquareFit chi_square_homogeneity(const std::vector<int64_t>& a,
                                           const std::vector<int64_t>& b) {
  ChiSquareFit fit;
  int64_t n_a = 0, n_b = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    n_a += a[i];
    n_b += b[i];
  }
  struct Cell {
    int64_t a, b;
    int64_t total() const { return a + b; }
  };
  std::vector<Cell> cells;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] + b[i] > 0) cells.push_back({a[i], b[i]});
  }
  const auto smaller = [](const Cell& x, const Cell& y) { return x.total() < y.total(); };
  std::sort(cells.begin(), cells.end(), smaller);
  const double share = static_cast<double>(std::min(n_a, n_b)) / static_cast<double>(n_a + n_b);
  while (cells.size() > 1 && static_cast<double>(cells[0].total()) * share < 5.0) {
    const Cell merged = {cells[0].a + cells[1].a, cells[0].b + cells[1].b};
    cells.erase(cells.begin(), cells.begin() + 2);
    cells.insert(std::lower_bound(cells.begin(), cells.end(), merged, smaller), merged);
  }
  const double n = static_cast<double>(n_a + n_b);
  for (const Cell& cell : cells) {
    const double expected_a = static_cast<double>(cell.total()) * static_cast<double>(n_a) / n;
    const double expected_b = static_cast<double>(cell.total()) * static_cast<double>(n_b) / n;
    const double da = static_cast<double>(cell.a) - expected_a;
    const double db = static_cast<double>(cell.b) - expected_b;
    fit.statistic += da * da / expected_a + db * db / expected_b;
  }
  fit.df = static_cast<int>(cells.size()) - 1;
  fit.p_value = fit.df > 0 ? chi_square_survival(fit.df, fit.statistic) : 1.0;
  return fit;
}

}  // namespace specstack
