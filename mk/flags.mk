# Shared compiler flags for every lesson, the helper library and the unit tests.
# pkg-config supplies the rdma-core flags, so the same Makefile works on any distribution.
CXX      ?= g++
PKGS     := libibverbs librdmacm
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CXXFLAGS ?= -O2 -g
CXXFLAGS += -std=c++20 -Wall -Wextra -Werror -Icommon $(PKG_CFLAGS)
LDLIBS   += $(PKG_LIBS)
