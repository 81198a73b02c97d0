"""Tiny UNet: GroupNorm, SiLU, strided-conv downsampling, nearest and bilinear upsampling, skip concat."""
import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.norm1 = nn.GroupNorm(4, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.norm2 = nn.GroupNorm(2, cout)

    def forward(self, x):
        x = F.silu(self.norm1(self.conv1(x)))
        return F.silu(self.norm2(self.conv2(x)))


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc1 = Block(3, 8)
        self.down1 = nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.enc2 = Block(8, 16)
        self.down2 = nn.MaxPool2d(2)
        self.mid = Block(16, 16)
        self.up2 = nn.Upsample(scale_factor=2, mode="nearest")
        self.dec2 = Block(32, 8)
        self.dec1 = Block(16, 8)
        self.out = nn.Conv2d(8, 2, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(self.down1(e1))
        m = self.mid(self.down2(e2))
        d2 = self.dec2(torch.cat([self.up2(m), e2], dim=1))
        up1 = F.interpolate(d2, size=e1.shape[-2:], mode="bilinear", align_corners=False)
        d1 = self.dec1(torch.cat([up1, e1], dim=1))
        return self.out(d1)


def make():
    torch.manual_seed(5)
    return UNet().eval(), (torch.randn(1, 3, 16, 16),)
