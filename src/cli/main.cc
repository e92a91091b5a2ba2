#include <cstdio>

int main() { std::puts("spillway"); return 0; }
