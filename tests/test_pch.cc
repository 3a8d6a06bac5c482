// The owner of the test programs' precompiled header (tests/CMakeLists.txt, kx_test_pch):
// a program only so that the header is compiled with a test program's flags. It runs nothing.
int main() { return 0; }
